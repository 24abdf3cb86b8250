"""A file ORT loads but cannot run at any level is a failed path with ORT's words, not "ok" with an
error tucked into each level: a CI gate on status_ok, and a person reading the table, must see it."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _gather_out_of_bounds(path, index: int):
    """MatMul then Gather(axis=1) of column ``index`` of 4: ORT checks the index only when it runs."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W")
    idx = numpy_helper.from_array(np.array([0, index], np.int64), "idx")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
         helper.make_node("Gather", ["h", "idx"], ["y"], name="pick", axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [w, idx])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _report(path, workdir):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.pipeline.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all", "all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    return run_comparison(ComparisonRequest(model_path=path, model_name=path.name, options=options), workdir)


def test_an_fp32_file_ort_runs_at_no_level_is_a_failed_path_naming_the_node(tmp_path):
    report = _report(_gather_out_of_bounds(tmp_path / "bad.onnx", 9), tmp_path / "bad")
    fp32 = report.artifacts["fp32"]
    assert fp32.status == "failed"
    assert fp32.error.stage == "evaluate" and fp32.error.type == "OrtRunFailed"
    assert "any level (disable_all, all)" in fp32.error.message and "'pick'" in fp32.error.message
    assert all(ol.error for ol in fp32.optimized.values())  # the levels keep their own errors


def test_the_same_file_with_the_index_in_range_is_ok(tmp_path):
    report = _report(_gather_out_of_bounds(tmp_path / "good.onnx", 3), tmp_path / "good")
    fp32 = report.artifacts["fp32"]
    assert fp32.status == "ok" and fp32.error is None
    assert report.artifacts["ort_qdq"].status == "ok"


def test_the_page_says_the_reference_failed_before_any_table(tmp_path):
    import time
    from types import SimpleNamespace

    from service.render.page import render_job_page

    report = _report(_gather_out_of_bounds(tmp_path / "bad.onnx", 9), tmp_path / "bad")
    job = SimpleNamespace(id="j", created_at=time.time(), status="succeeded", model_name="bad.onnx", error=None)
    page = render_job_page(job, report, [])
    glance = page[page.index('<section id="glance">'):page.index("<table")]
    assert "fp32 reference, evaluate: ONNX Runtime could not run this file at any level" in glance
