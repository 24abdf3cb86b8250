"""A job in which no quantized path produced a file still passed a verdict with no gates, exit 0: the
lint `no_quantized_artifact` says the report compares nothing (an already quantized upload, inspected
as is on purpose, gets none)."""
from __future__ import annotations

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions


def test_a_job_where_every_path_failed_says_so(tmp_path):
    # a PT2E time limit no path can meet: the only requested path fails
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False},
        "pt2e": {"time_limit_s": 0.01}})
    report = run_comparison(ComparisonRequest(example="conv_relu", options=options), tmp_path / "job")
    assert report.artifacts["pt2e_qdq"].status == "failed" and report.verdict.passed
    lint = next(l for l in report.lints if l.code == "no_quantized_artifact")
    assert lint.severity == "error" and "pt2e_qdq failed (path_time_limit)" in lint.message
    assert "status_ok" in lint.hint


def test_an_already_quantized_upload_inspected_as_is_gets_no_such_lint(tmp_path):
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    first = run_comparison(ComparisonRequest(example="conv_relu", options=options), tmp_path / "a")
    assert not [l for l in first.lints if l.code == "no_quantized_artifact"]
    quantized = tmp_path / "a" / "artifacts" / "ort_qdq.onnx"
    upload = tmp_path / "q.onnx"
    upload.write_bytes(quantized.read_bytes())
    again = run_comparison(ComparisonRequest(model_path=upload, model_name="q.onnx", options=options), tmp_path / "b")
    assert again.artifacts["ort_qdq"].status == "skipped"
    assert not [l for l in again.lints if l.code == "no_quantized_artifact"]
