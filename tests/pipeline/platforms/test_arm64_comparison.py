"""An arm64 comparison end to end (issue 41): a tiny residual net compared with options.platforms
["arm64"], the emulated ORT set up by `make`; and the same job when the arm64 runtime is missing."""

from __future__ import annotations

import pytest

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.ort.targets import host_platform
from service.render.text import summary_table
from service.schemas.options import ComparisonOptions
from tests.pipeline.platforms.test_arm64_emulated import residual_fp32

pytestmark = pytest.mark.skipif(host_platform().int8_allowed, reason="this machine is ARM: nothing is emulated")

OPTIONS = {"artifacts": ["ort_qdq", "ort_qoperator"], "levels": ["disable_all", "extended", "layout"],
           "calibration_samples": 4, "eval_samples": 3, "latency": {"enabled": False}, "advice": {"enabled": False},
           "layers": {"enabled": False}, "platforms": ["arm64"]}


@pytest.fixture(scope="module")
def arm64_comparison(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    model = residual_fp32(d / "residual.onnx")
    return run_comparison(ComparisonRequest(model_path=model, model_name="residual.onnx",
                                            options=ComparisonOptions.model_validate(OPTIONS)), d / "job")


def test_an_arm64_comparison_sets_arm64_beside_this_machine(arm64_comparison):
    report = arm64_comparison
    arm = report.platforms["arm64"]
    assert arm.status == "ok" and arm.latency == "not measured: emulated"
    # Every artifact at every level, as the emulated ORT saved it.
    assert set(arm.optimized) == {"fp32", "ort_qdq", "ort_qoperator"}
    assert all(set(per) == {"disable_all", "extended", "layout"} for per in arm.optimized.values())
    # ort_qdq at extended: x86 leaves the shared tensors' Conv/Add float, arm64 fuses them; the row names the rule.
    row = next(r for r in arm.side_by_side if (r.artifact, r.level) == ("ort_qdq", "extended"))
    assert row.platform_int8_coverage == 1.0 > row.host_int8_coverage
    assert any(r.startswith("QDQIsInt8Allowed()") for r in row.rules) and row.blockers_host_only
    # fp32 at layout: NCHWc here, none on arm64, named by its rule.
    fp32 = next(r for r in arm.side_by_side if (r.artifact, r.level) == ("fp32", "layout"))
    assert fp32.host_layout_ops.get("nchwc") and not fp32.platform_layout_ops.get("nchwc")
    assert any(r.startswith("NchwcTransformer") for r in fp32.rules)
    assert arm.accuracy.samples_run == 3 and arm.optimized["ort_qdq"]["extended"].numerics is not None
    assert any(row.decision for row in arm.decisions)
    assert arm.advice.judged_on.startswith("graphs and accuracy only")


def test_the_chapters_arm64_statements_are_measured_on_arm64(arm64_comparison):
    notes = {n.topic: n for n in arm64_comparison.platform}
    assert any(e.startswith("measured on arm64") for e in notes["activation dtype"].evidence)
    assert any("no com.microsoft.nchwc.* node" in e for e in notes["NCHWc"].evidence)
    assert notes["arm64: kernels and timing"].here.startswith("not measured: emulated")


def test_the_cli_summary_shows_this_machine_beside_arm64(arm64_comparison):
    text = summary_table(arm64_comparison)
    assert f"{host_platform().name} | arm64" in text and "latency on arm64: not measured: emulated" in text
    assert "QDQIsInt8Allowed(): false here, true on arm64" in text


def test_without_the_arm64_runtime_the_platform_is_refused_and_the_job_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTCOMPARE_ARM64_ROOT", str(tmp_path / "no-runtime"))
    report = run_comparison(ComparisonRequest(model_path=residual_fp32(tmp_path / "r.onnx"), model_name="r.onnx",
                                              options=ComparisonOptions.model_validate(
                                                  {**OPTIONS, "levels": ["extended"], "artifacts": ["ort_qdq"]})),
                            tmp_path / "job")
    assert report.platforms["arm64"].status == "unavailable"
    assert report.platforms["arm64"].error.code == "platform_unavailable"
    assert report.artifacts["ort_qdq"].status == "ok" and report.artifacts["ort_qdq"].optimized["extended"].int8_coverage
    assert "arm64: not run: platform_unavailable" in summary_table(report)
