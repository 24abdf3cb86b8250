"""A string Constant as a graph output beside a float one (twentieth pass): the PT2E path failed with
``path_failed`` ("a constant of numpy dtype object", the hint blaming the toolchain); it is skipped now,
saying torch has no tensor of that type, and the ORT paths are reported as before."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions


def test_a_string_constant_output_skips_pt2e_with_a_reason(tmp_path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
         helper.make_node("Constant", [], ["label"], name="label", value=helper.make_tensor("v", TensorProto.STRING, [1], [b"cat"]))],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8]), helper.make_tensor_value_info("label", TensorProto.STRING, [1])],
        [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "m.onnx", options=options), tmp_path / "job")
    pt2e = report.artifacts["pt2e_qdq"]
    assert pt2e.status == "skipped" and pt2e.error.code == "path_skipped", pt2e.error
    assert "numpy dtype object" in pt2e.error.message and "torch has no tensor" in pt2e.error.message
    assert report.artifacts["ort_qdq"].status == "ok"
