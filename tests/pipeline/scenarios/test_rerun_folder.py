"""A job folder written again (a CLI --out used twice, a job run again after its worker was lost)
kept the earlier run's files: a path that failed in the second run left the first model's file
under its name beside a report that says 'failed, file: null'."""
from __future__ import annotations

import shutil

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions

QUICK = {"levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
         "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}


def test_a_second_run_into_the_folder_leaves_none_of_the_first_run_s_files(tmp_path):
    first = ComparisonOptions.model_validate({**QUICK, "artifacts": ["ort_qdq", "ort_qoperator"]})
    run_comparison(ComparisonRequest(example="conv_relu", options=first), tmp_path / "out")
    assert (tmp_path / "out" / "artifacts" / "ort_qoperator.onnx").is_file()
    second = ComparisonOptions.model_validate({**QUICK, "artifacts": ["ort_qdq"]})
    report = run_comparison(ComparisonRequest(example="conv_relu", options=second), tmp_path / "out")
    left = sorted(p.name for p in (tmp_path / "out" / "artifacts").iterdir())
    assert not [n for n in left if n.startswith("ort_qoperator")], left
    assert set(report.artifacts) == {"fp32", "ort_qdq"}


def test_a_model_compared_from_inside_the_folder_is_left_where_it_is(tmp_path):
    run_comparison(ComparisonRequest(example="conv_relu", options=ComparisonOptions.model_validate(
        {**QUICK, "artifacts": ["ort_qdq"]})), tmp_path / "out")
    model = tmp_path / "out" / "artifacts" / "fp32.onnx"
    kept = tmp_path / "model_copy.onnx"
    shutil.copyfile(model, kept)
    report = run_comparison(ComparisonRequest(model_path=model, model_name="fp32.onnx", options=ComparisonOptions.model_validate(
        {**QUICK, "artifacts": ["ort_qdq"]})), tmp_path / "out")
    assert report.artifacts["ort_qdq"].status == "ok" and model.read_bytes() == kept.read_bytes()
