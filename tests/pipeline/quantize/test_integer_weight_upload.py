"""An upload that stores its weights as int8 and dequantizes them with Cast -> Mul (a weight-only
quantized export: tinyocr's PP-OCRv6 recognizer, 39 weights) was shown as a plain float reference,
weights "none", and quantized files as large as it with no word why. The lint
`upload_weights_already_integer` says what the reference is."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions
from service.pipeline.verdict.lints import integer_weight_lints


def _weight_only(path, *, integer_weights: bool):
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8)
    if integer_weights:
        inits = [numpy_helper.from_array(w, "w_int8"), numpy_helper.from_array(np.array(0.01, np.float32), "w_scale")]
        nodes = [helper.make_node("Cast", ["w_int8"], ["w_f"], to=TensorProto.FLOAT, name="cast_w"),
                 helper.make_node("Mul", ["w_f", "w_scale"], ["w"], name="scale_w")]
    else:
        inits, nodes = [numpy_helper.from_array(w.astype(np.float32) * 0.01, "w")], []
    # an int64 shape constant beside them: not an integer weight type
    inits.append(numpy_helper.from_array(np.array([1, 8 * 16 * 16], np.int64), "flat"))
    nodes += [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
              helper.make_node("Relu", ["c"], ["r"], name="relu"),
              helper.make_node("Reshape", ["r", "flat"], ["y"], name="flatten")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8 * 16 * 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_weight_only_quantized_upload_is_named_as_such(tmp_path):
    path = _weight_only(tmp_path / "wo.onnx", integer_weights=True)
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, model_name="wo.onnx", options=options), tmp_path / "job")
    lint = next(l for l in report.lints if l.code == "upload_weights_already_integer")
    assert lint.artifact == "fp32" and "1 weight(s) as integers" in lint.message and "'w_int8'" in lint.message
    assert report.artifacts["ort_qdq"].status == "ok"  # the paths still run: the lint says what they compare


def test_a_float_upload_and_integer_shape_constants_get_no_such_lint(tmp_path):
    assert integer_weight_lints(onnx.load(str(_weight_only(tmp_path / "f.onnx", integer_weights=False)))) == []
