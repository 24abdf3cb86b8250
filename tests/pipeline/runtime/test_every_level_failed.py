"""A file ORT loads but cannot run is not "ok" with an error tucked into each level: the job stops in
its fp32 stage with ORT's words (a CI job and a person must see it before any table)."""
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
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all", "all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    return run_comparison(ComparisonRequest(model_path=path, model_name=path.name, options=options), workdir)


def test_an_fp32_file_ort_cannot_run_stops_the_job_before_any_path_naming_the_node(tmp_path):
    """Before, every path ran, fp32 failed at every level and a job without gates read "passed"; the
    fp32 stage now runs the reference once on the first calibration sample and refuses the job with
    ORT's words (fp32/runs.py). The shapes are the model's own: invalid_model."""
    import pytest

    from service.errors import InvalidModel

    with pytest.raises(InvalidModel) as e:
        _report(_gather_out_of_bounds(tmp_path / "bad.onnx", 9), tmp_path / "bad")
    assert "does not run at the job's input shapes (x: [2, 8])" in e.value.message and "pick" in e.value.message
    assert not (tmp_path / "bad" / "artifacts" / "ort_qdq.onnx").exists()


def test_the_same_file_with_the_index_in_range_is_ok(tmp_path):
    report = _report(_gather_out_of_bounds(tmp_path / "good.onnx", 3), tmp_path / "good")
    fp32 = report.artifacts["fp32"]
    assert fp32.status == "ok" and fp32.error is None
    assert report.artifacts["ort_qdq"].status == "ok"
