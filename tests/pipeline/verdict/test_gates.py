"""CI gates: the text syntax, and verdicts over reports with and without the data a gate reads."""

from __future__ import annotations

import json

from datetime import datetime, timezone

import pytest

from service.errors import InvalidOptions
from service.pipeline.verdict.gates import gate_from_string, gate_to_string, verdict_from_report
from service.schemas.options import LEVELS, Gate
from service.schemas.report import Report



def _level(level: str, *, sqnr=30.0, cosine=0.999, max_abs=0.05, coverage=1.0, median=1.0, numerics=True, latency=True,
           error=None):
    out = {"level": level, "op_histogram": {"Conv": 1}, "int8_coverage": coverage, "error": error}
    if numerics:
        out["numerics"] = {
            "outputs": [{"name": "y", "reference": "y", "sqnr_db": sqnr, "cosine": cosine, "max_abs_error": max_abs}],
            "worst_sqnr_db": sqnr, "worst_cosine": cosine, "worst_max_abs_error": max_abs, "samples": 8,
        }
    if latency:
        out["latency"] = {"median_ms": median, "p90_ms": median * 1.1, "runs": 10, "warmup": 2, "intra_op_threads": 1}
    return out


def _artifact(name: str, *, status="ok", levels=None, **level_kw):
    if status != "ok":
        return {
            "name": name, "status": status,
            "error": {"stage": "quantize", "type": "AttributeError", "message": "'NoneType' has no attribute 'x'"},
        }
    return {"name": name, "status": "ok", "optimized": {lv: _level(lv, **level_kw) for lv in (levels or LEVELS)}}


def make_report(artifacts: dict, *, requested=("pt2e_qdq", "ort_qdq", "ort_qoperator"), levels=LEVELS) -> Report:
    return Report.model_validate({
        "created_at": datetime(2025, 1, 1, tzinfo=timezone.utc).isoformat(),
        "environment": {"versions": {}, "python": "3.11", "platform": "linux", "cpu": {"arch": "x86_64"}},
        "options": {"artifacts": list(requested), "levels": list(levels)},
        "model": {"name": "conv_relu", "sha256": "0" * 64, "format": "example", "opset_imports": {"": 18},
                  "inputs": [], "outputs": [], "node_count": 2},
        "samples": {"source": "generated", "calibration_count": 16, "eval_count": 8},
        "artifacts": artifacts,
        "verdict": {"passed": True},
    })


def healthy(**kw) -> Report:
    arts = {"fp32": _artifact("fp32", median=2.0, sqnr=None, coverage=0.0)}
    for name in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        arts[name] = _artifact(name, **kw)
    return make_report(arts)


# ---- syntax ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, expected",
    [
        ("ort_qdq.all.sqnr_db>=25", dict(artifact="ort_qdq", level="all", metric="sqnr_db", op=">=", value=25)),
        ("*.basic.cosine > 0.99", dict(artifact="*", level="basic", metric="cosine", op=">", value=0.99)),
        ("pt2e_qdq.latency_ratio<=1.2", dict(artifact="pt2e_qdq", level="all", metric="latency_ratio", op="<=", value=1.2)),
        ("extended.int8_coverage==1", dict(artifact="*", level="extended", metric="int8_coverage", op="==", value=1)),
        ("status_ok", dict(artifact="*", metric="status_ok", op=">=", value=1)),
        ("ort_qoperator.max_abs_error<1e-2", dict(artifact="ort_qoperator", metric="max_abs_error", op="<", value=0.01)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_gate_text_parses_into_the_options_gate(text, expected):
    assert gate_from_string(text) == Gate(**expected)


@pytest.mark.parametrize(
    "text",
    ["", "ort_qdq.all.sqnr>=25", "ort_qdq.all.sqnr_db>=abc", "ort_qdq.all.sqnr_db", "Fp16.all.sqnr_db>=1",
     "all.ort_qdq.sqnr_db>=1", "ort_qdq.ort_qdq.sqnr_db>=1", "ort_qdq.all.sqnr_db=>25", "a.b.c.sqnr_db>=1",
     "ort_qdq.all.sqnr_db>=nan"],
    ids=repr,
)
def test_malformed_gate_text_is_refused_with_the_syntax_in_the_hint(text):
    with pytest.raises(InvalidOptions) as e:
        gate_from_string(text)
    assert e.value.code == "invalid_options"
    assert "ort_qdq.all.sqnr_db>=25" in e.value.hint


@pytest.mark.parametrize("text", ["ort_qdq.all.sqnr_db>=25", "*.basic.cosine>0.99", "status_ok",
                                  "ort_qdq.status_ok", "status_ok>=0.5", "pt2e_qdq.layout.latency_ratio<=1.25"])
def test_gate_text_round_trips(text):
    assert gate_to_string(gate_from_string(text)) == text


# ---- verdicts -------------------------------------------------------------------------------

def test_no_gates_pass():
    v = verdict_from_report(healthy(), [])
    assert v.passed and v.gates == [] and v.failures == []


def test_status_ok_passes_when_every_requested_path_is_ok():
    v = verdict_from_report(healthy(), [gate_from_string("status_ok")])
    assert v.passed, v
    assert v.gates[0].actual == 1.0


def test_status_ok_fails_naming_the_failed_path_and_its_stage():
    arts = healthy().model_dump()["artifacts"]
    arts["ort_qoperator"] = _artifact("ort_qoperator", status="failed")
    v = verdict_from_report(make_report(arts), [gate_from_string("status_ok")])
    assert not v.passed
    r = v.gates[0]
    assert r.actual == pytest.approx(2 / 3)
    assert "ort_qoperator failed at quantize" in r.message
    assert v.failures == [f"status_ok: {r.message}"]


def test_status_ok_counts_a_requested_artifact_missing_from_the_report():
    arts = healthy().model_dump()["artifacts"]
    del arts["pt2e_qdq"]
    v = verdict_from_report(make_report(arts), [gate_from_string("status_ok")])
    assert not v.passed and "pt2e_qdq missing" in v.gates[0].message


def test_a_gate_on_a_failed_path_fails_with_a_message_not_a_crash():
    arts = healthy().model_dump()["artifacts"]
    arts["ort_qdq"] = _artifact("ort_qdq", status="failed")
    v = verdict_from_report(make_report(arts), [gate_from_string("ort_qdq.all.sqnr_db>=25")])
    assert not v.passed
    assert v.gates[0].actual is None
    assert "path failed at quantize" in v.gates[0].message


def test_a_gate_on_a_level_that_was_not_run_fails():
    report = make_report({"ort_qdq": _artifact("ort_qdq", levels=["all"])}, requested=["ort_qdq"], levels=["all"])
    v = verdict_from_report(report, [gate_from_string("ort_qdq.basic.sqnr_db>=25")])
    assert not v.passed and "was not run" in v.gates[0].message


def test_a_gate_on_a_level_without_numerics_fails():
    report = make_report({"ort_qdq": _artifact("ort_qdq", numerics=False, latency=False)}, requested=["ort_qdq"])
    v = verdict_from_report(report, [gate_from_string("ort_qdq.all.sqnr_db>=25"),
                                     gate_from_string("ort_qdq.all.latency_ratio<=2")])
    assert not v.passed
    assert "no numerics at level 'all'" in v.gates[0].message
    assert "no latency at level 'all'" in v.gates[1].message
    assert len(v.failures) == 2


def test_a_gate_on_an_artifact_that_was_not_requested_fails():
    report = make_report({"ort_qdq": _artifact("ort_qdq")}, requested=["ort_qdq"])
    v = verdict_from_report(report, [gate_from_string("pt2e_qdq.all.cosine>=0.9")])
    assert not v.passed and "not in the report" in v.gates[0].message


@pytest.mark.parametrize(
    "text, passed, actual",
    [
        ("ort_qdq.all.sqnr_db>=25", True, 30.0),
        ("ort_qdq.all.sqnr_db>=35", False, 30.0),
        ("*.all.cosine>=0.99", True, 0.999),
        ("*.all.max_abs_error<=0.01", False, 0.05),
        ("ort_qdq.all.int8_coverage>=0.9", True, 1.0),
        ("ort_qdq.all.latency_ratio<=0.6", True, 0.5),
        ("ort_qdq.all.latency_ratio<0.5", False, 0.5),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_metric_gates_read_the_worst_value_at_the_level(text, passed, actual):
    v = verdict_from_report(healthy(), [gate_from_string(text)])
    assert v.passed is passed, v.gates[0].message
    assert v.gates[0].actual == pytest.approx(actual)


def test_a_star_gate_reports_the_worst_artifact_and_names_the_failing_one():
    arts = healthy().model_dump()["artifacts"]
    arts["pt2e_qdq"] = _artifact("pt2e_qdq", sqnr=12.5)
    v = verdict_from_report(make_report(arts), [gate_from_string("*.all.sqnr_db>=25")])
    assert not v.passed
    assert v.gates[0].actual == 12.5
    assert v.gates[0].message.startswith("pt2e_qdq=12.5 not >= 25")


def test_latency_ratio_without_an_fp32_baseline_fails():
    report = make_report({"ort_qdq": _artifact("ort_qdq")}, requested=["ort_qdq"])
    v = verdict_from_report(report, [gate_from_string("ort_qdq.all.latency_ratio<=2")])
    assert not v.passed and "no fp32 baseline" in v.gates[0].message


def test_a_nan_metric_fails_the_gate():
    report = make_report({"ort_qdq": _artifact("ort_qdq", sqnr=float("nan"))}, requested=["ort_qdq"])
    v = verdict_from_report(report, [gate_from_string("ort_qdq.all.sqnr_db>=-1000")])
    assert not v.passed and "NaN" in v.gates[0].message


def test_exactly_zero_error_is_null_sqnr_and_passes_as_infinite():
    report = make_report({"ort_qdq": _artifact("ort_qdq", sqnr=None)}, requested=["ort_qdq"])
    v = verdict_from_report(report, [gate_from_string("ort_qdq.all.sqnr_db>=25")])
    assert v.passed, v.gates[0].message
    # inf never reaches the JSON as a bare Infinity (which strict JSON parsers refuse)
    text = v.model_dump_json()
    assert "Infinity" not in text and "NaN" not in text
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in the verdict JSON"))
    assert data["passed"] is True and data["gates"][0]["passed"] is True


def test_a_level_whose_session_failed_says_why_the_gate_has_no_numbers():
    report = make_report({"ort_qdq": _artifact("ort_qdq", numerics=False, latency=False,
                                               error="InvalidGraph: QLinearConv x has wrong type")},
                         requested=["ort_qdq"])
    v = verdict_from_report(report, [gate_from_string("ort_qdq.all.cosine>=0.99")])
    assert not v.passed and "QLinearConv x has wrong type" in v.gates[0].message


# ---- on a real comparison (shared with the other pipeline tests; latency is off there) ---------

def test_gates_on_a_real_conv_relu_report(compared):
    report, _ = compared("conv_relu")
    arts = ("pt2e_qdq", "ort_qdq", "ort_qoperator")
    worst_sqnr = min(report.artifacts[a].optimized["all"].numerics.worst_sqnr_db for a in arts)
    worst_cosine = min(report.artifacts[a].optimized["all"].numerics.worst_cosine for a in arts)
    # Thresholds just either side of the report's own worst figure: the gate must read that figure.
    gates = [gate_from_string(t) for t in (
        "status_ok", f"*.all.sqnr_db>={worst_sqnr - 0.5:.3f}", f"*.all.sqnr_db>={worst_sqnr + 0.5:.3f}",
        f"*.all.cosine>={worst_cosine - 1e-4:.6f}", "ort_qdq.all.int8_coverage>0", "ort_qdq.all.latency_ratio<=2")]
    v = verdict_from_report(report, gates)
    ok, sqnr_below, sqnr_above, cosine, coverage, latency = v.gates
    assert ok.passed and sqnr_below.passed and cosine.passed and coverage.passed, v.failures
    assert sqnr_below.actual == pytest.approx(worst_sqnr)
    assert not sqnr_above.passed
    assert not latency.passed and "no latency at level 'all'" in latency.message
    assert v.failures == [f"{gate_to_string(gates[2])}: {sqnr_above.message}",
                          f"ort_qdq.all.latency_ratio<=2: {latency.message}"]
