"""Gates relative to a baseline report: syntax, the figures taken from the baseline, the verdict's deltas."""

from __future__ import annotations

import pytest
from test_gates import _artifact, healthy, make_report

from service.errors import InvalidOptions
from service.pipeline.verdict.gates import baseline_values_from_report, gate_from_string, gate_to_string, verdict_from_report
from service.schemas.options import ComparisonOptions, Gate


def _resolved(text: str, baseline) -> Gate:
    gate = gate_from_string(text)
    return gate.model_copy(update={"baseline_values": baseline_values_from_report(baseline, gate)})


@pytest.mark.parametrize("text, value", [
    ("ort_qdq.all.sqnr_db>=baseline-0.5", -0.5),
    ("*.all.latency_ratio<=baseline+0.1", 0.1),
    ("ort_qdq.cosine>=baseline", 0.0),
])
def test_relative_gate_text_round_trips(text, value):
    gate = gate_from_string(text)
    assert (gate.relative_to, gate.value) == ("baseline", value)
    assert gate_from_string(gate_to_string(gate)) == gate


@pytest.mark.parametrize("text", ["ort_qdq.all.sqnr_db>=baseline-x", "status_ok>=baseline", "ort_qdq.sqnr_db>=baselin"])
def test_malformed_relative_gates_are_refused(text):
    with pytest.raises(InvalidOptions):
        gate_from_string(text)


def test_relative_gate_without_any_baseline_is_refused_by_the_options():
    gate = gate_from_string("ort_qdq.all.sqnr_db>=baseline-0.5").model_dump()
    with pytest.raises(ValueError, match="options.baseline"):
        ComparisonOptions(gates=[gate])
    ComparisonOptions(gates=[gate], baseline="0" * 32)  # an id the API resolves is enough


def test_same_report_as_its_own_baseline_passes_with_zero_delta():
    report = healthy(sqnr=31.25)
    gate = _resolved("ort_qdq.all.sqnr_db>=baseline-0.5", report)
    assert gate.baseline_values == {"ort_qdq": 31.25}
    result = verdict_from_report(report, [gate]).gates[0]
    assert result.passed and (result.actual, result.baseline, result.delta) == (31.25, 31.25, 0.0)
    assert "baseline 31.25, delta +0" in result.message


def test_a_drop_beyond_the_allowance_fails_and_states_baseline_new_value_and_delta():
    gate = _resolved("ort_qdq.all.sqnr_db>=baseline-0.5", healthy(sqnr=31.0))
    result = verdict_from_report(healthy(sqnr=30.0), [gate]).gates[0]
    assert not result.passed
    assert (result.actual, result.baseline, result.delta) == (30.0, 31.0, -1.0)
    assert result.message == "ort_qdq=30 (baseline 31, delta -1) not >= baseline-0.5 (30.5)"
    # a drop inside the allowance passes
    assert verdict_from_report(healthy(sqnr=30.6), [gate]).passed


def test_each_artifact_is_held_to_its_own_baseline_figure():
    base = make_report({"fp32": _artifact("fp32", median=2.0), "pt2e_qdq": _artifact("pt2e_qdq", sqnr=40.0),
                        "ort_qdq": _artifact("ort_qdq", sqnr=20.0), "ort_qoperator": _artifact("ort_qoperator", sqnr=20.0)})
    gate = _resolved("*.all.sqnr_db>=baseline-1", base)
    # 35 dB would pass a fixed 19 dB threshold, but pt2e_qdq fell 5 dB from its own 40 dB
    new = make_report({"fp32": _artifact("fp32", median=2.0), "pt2e_qdq": _artifact("pt2e_qdq", sqnr=35.0),
                       "ort_qdq": _artifact("ort_qdq", sqnr=20.0), "ort_qoperator": _artifact("ort_qoperator", sqnr=21.0)})
    result = verdict_from_report(new, [gate]).gates[0]
    assert not result.passed and (result.baseline, result.delta) == (40.0, -5.0)
    assert result.message.startswith("pt2e_qdq=35 (baseline 40, delta -5) not >=")


def test_a_baseline_without_the_figure_fails_the_gate_and_says_so():
    base = make_report({"fp32": _artifact("fp32", median=2.0), "ort_qdq": _artifact("ort_qdq", status="failed")},
                       requested=("ort_qdq",))
    gate = _resolved("ort_qdq.all.sqnr_db>=baseline-0.5", base)
    assert gate.baseline_values == {}
    result = verdict_from_report(healthy(), [gate]).gates[0]
    assert not result.passed and result.baseline is None
    assert "the baseline has no sqnr_db at level 'all'" in result.message


def test_latency_ratio_against_the_baseline():
    gate = _resolved("ort_qdq.all.latency_ratio<=baseline+0.1", healthy(median=1.0))  # 1.0 / fp32 2.0 = 0.5
    assert verdict_from_report(healthy(median=1.1), [gate]).passed            # 0.55
    result = verdict_from_report(healthy(median=1.4), [gate]).gates[0]        # 0.7 > 0.6
    assert not result.passed and result.delta == pytest.approx(0.2)


def test_an_exact_baseline_sqnr_is_kept_as_null_and_only_an_exact_result_meets_it():
    gate = _resolved("ort_qdq.all.sqnr_db>=baseline-3", healthy(sqnr=None))
    assert gate.baseline_values["ort_qdq"] is None
    assert verdict_from_report(healthy(sqnr=None), [gate]).passed
    assert not verdict_from_report(healthy(sqnr=90.0), [gate]).passed
