"""The lint `symbolic_dims_measured_at_one_size` said "the artifacts keep symbolic input dims" for
every file; the PT2E file of an ONNX upload is exported at the job's shapes and runs at no other
(PP-OCRv4's detector: pt2e_qdq takes [1, 3, 320, 320] only; silero's fails at [1, 256]). The lint
now names the files that fixed them, checked on the files themselves."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions


def test_the_lint_names_the_pt2e_file_as_fixed_at_the_job_shapes(tmp_path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w")]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                               helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "input_shapes": {"x": [1, 3, 16, 16]},
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "m.onnx", model_name="m.onnx", options=options),
                            tmp_path / "job")
    lint = next(x for x in report.lints if x.code == "symbolic_dims_measured_at_one_size")
    assert lint.message.startswith("the artifacts but pt2e_qdq keep symbolic input dims (pt2e_qdq fixes them")
    assert lint.severity == "warning"
    art = tmp_path / "job" / "artifacts"
    other = {"x": np.zeros((1, 3, 24, 24), np.float32)}
    ort.InferenceSession(str(art / "ort_qdq.onnx"), providers=["CPUExecutionProvider"]).run(None, other)
    with pytest.raises(Exception, match="Got invalid dimensions|Got: 24"):  # what the lint says of the PT2E file
        ort.InferenceSession(str(art / "pt2e_qdq.onnx"), providers=["CPUExecutionProvider"]).run(None, other)
