"""An upload ORT refuses to load, which onnx's checker (without its full check) takes: a Conv's
float output added to a float64 constant. Before, every path and level failed with ORT's words
(PT2E, both ORT quantizers, the fp32 row) after the quantizers had run, and quant_pre_process
printed a traceback into the CLI's output while the report's note said its optimization was "ok"."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.errors import InvalidModel
from tests import models


def _float_plus_double(path):
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Add", ["c", "d"], ["y"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"),
         numpy_helper.from_array(np.ones(1, np.float64), "d")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_a_model_ort_cannot_load_stops_the_job_once_naming_ort_s_reason(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.pipeline.inputs.safety import onnx_model_from_path
    from service.schemas.options import ComparisonOptions

    path = _float_plus_double(tmp_path / "m.onnx")
    onnx_model_from_path(path)  # the submit checks take it
    with pytest.raises(Exception, match="bound to different types"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    options = ComparisonOptions.model_validate({"calibration_samples": 2, "eval_samples": 1,
                                                "latency": {"enabled": False}, "advice": {"enabled": False}})
    with pytest.raises(InvalidModel, match=r"ONNX Runtime cannot load this model: .*node \(add\)") as e:
        run_comparison(ComparisonRequest(model_path=path, model_name="m.onnx", options=options), tmp_path / "job")
    assert "/tmp" not in e.value.message and not (tmp_path / "job" / "artifacts" / "ort_qdq.onnx").exists()


def test_a_failed_pre_process_optimization_is_said_and_its_traceback_kept_out_of_the_output(tmp_path, capfd):
    """quant_pre_process logs the failure of its ORT step with a traceback and goes on; the note
    says what failed, in ORT's words, and nothing reaches stderr."""
    from service.pipeline.quantize.ort_quant import preprocessed_for_ort

    path = _float_plus_double(tmp_path / "m.onnx")
    _, note = preprocessed_for_ort(path, tmp_path / "pre.onnx")
    assert note.startswith("quant_pre_process: its ORT basic optimization failed (")
    assert "bound to different types" in note and "ok" not in note.split("(")[0]
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out


def _conv(path, dtype):
    np_dtype = {TensorProto.DOUBLE: np.float64, TensorProto.FLOAT: np.float32}[dtype]
    return models.save("conv", path, w=np.ones((4, 3, 3, 3), np_dtype), elem=dtype, names=("conv",), ir=9)


def test_a_kernel_ort_s_cpu_build_lacks_is_named_with_the_types_asked_for(tmp_path):
    """A float64 Conv is a valid model ORT's CPU registry has no kernel for (NOT_IMPLEMENTED): it was
    refused as invalid_model with "fix what ORT names"; the types are what to change. The same Conv in
    float32 loads (the one condition)."""
    from service.errors import UnsupportedModel
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    ort.InferenceSession(str(_conv(tmp_path / "f32.onnx", TensorProto.FLOAT)), providers=["CPUExecutionProvider"])
    path = _conv(tmp_path / "f64.onnx", TensorProto.DOUBLE)
    with pytest.raises(Exception, match=r"NOT_IMPLEMENTED.*Could not find an implementation for Conv"):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    options = ComparisonOptions.model_validate({"calibration_samples": 2, "eval_samples": 1,
                                                "latency": {"enabled": False}, "advice": {"enabled": False}})
    with pytest.raises(UnsupportedModel) as e:
        run_comparison(ComparisonRequest(model_path=path, model_name="m.onnx", options=options), tmp_path / "job")
    assert e.value.code == "unsupported_model"
    assert "no kernel for Conv (opset 11) node 'conv' with inputs of type float64, float64" in e.value.message
    assert "float32" in e.value.hint


def _pool_reshape(path):
    """x [n, 4, h, w] -> MaxPool 2x2 -> Reshape to [-1, 64] -> MatMul: runs only where 4*h/2*w/2 is a
    multiple of 64 (h = w = 8), as a torch model with a fixed view(-1, 256) after a dynamic size."""
    g = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
         helper.make_node("Reshape", ["p", "s"], ["r"], name="flat"),
         helper.make_node("MatMul", ["r", "w"], ["y"], name="head")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [numpy_helper.from_array(np.array([-1, 64], np.int64), "s"),
         numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32), "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def test_input_shapes_the_model_cannot_run_at_are_refused_before_any_path_runs(tmp_path):
    """At 12x12 the Reshape fails: fp32 failed at every level, PT2E was skipped, both ORT quantizers
    failed with "exclude the node", and the job (no gates) exited 0 with verdict passed. Now the job
    stops in its fp32 stage as invalid_options naming ORT's words; at 8x8 the same model runs."""
    from service.errors import InvalidOptions
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    path = _pool_reshape(tmp_path / "m.onnx")

    def job(shape, name):
        options = ComparisonOptions.model_validate({
            "input_shapes": {"x": shape}, "calibration_samples": 2, "eval_samples": 1, "levels": ["disable_all"],
            "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
        return run_comparison(ComparisonRequest(model_path=path, model_name="m.onnx", options=options), tmp_path / name)

    with pytest.raises(InvalidOptions) as e:
        job([1, 4, 12, 12], "bad")
    assert e.value.code == "invalid_options"
    assert "does not run at the job's input shapes (x: [1, 4, 12, 12])" in e.value.message
    assert "Reshape" in e.value.message or "flat" in e.value.message
    assert "options.input_shapes" in e.value.hint
    assert not (tmp_path / "bad" / "artifacts" / "ort_qdq.onnx").exists()
    report = job([1, 4, 8, 8], "good")
    assert all(a.status == "ok" for a in report.artifacts.values())
