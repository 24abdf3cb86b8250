"""Advice within the extras' budget (issues 39, 47): candidates by expected gain, the best one always
measured, the rest listed with the option that reaches them."""

from __future__ import annotations

from service.pipeline.extras_budget import REACH_FURTHER
from service.pipeline.advice.advice import Candidate, by_expected_gain

UINT8 = {"ort": {"activation_type": "uint8"}}
SWITCH = {"session": {"session.qdqisint8allowed": "1"}}


def test_candidates_run_in_order_of_expected_gain():
    qdq = Candidate("ort_qdq", UINT8, "r", blocked=("a", "b", "c", "d"))
    qop = Candidate("ort_qoperator", UINT8, "r")
    switch = Candidate("pt2e_qdq", SWITCH, "r", blocked=tuple(f"n{i}" for i in range(40)))
    few = Candidate("ort_qdq", {"ort": {"activation_type": "uint8", "reduce_range": True}}, "r", blocked=("a",))
    # QOperator's s8s8 kernels: the slowest file first (the most a change to it can save), the session
    # switch (refuted by measurement on x86) after every uint8 re-quantization whatever it blocks
    order = by_expected_gain([switch, few, qdq, qop], {"ort_qdq": 5.0, "ort_qoperator": 15.0, "pt2e_qdq": 40.0})
    assert order == [qop, qdq, few, switch]


def test_a_job_with_a_candidate_measures_the_best_one_even_on_no_budget(compared):
    """Issue 47: advice's best candidate is what a user acts on, so it is measured whatever the share; what
    the budget did not reach (the table, the other candidates) is listed with the option that reaches it."""
    report, _ = compared("op_zoo_net", extras={"seconds": 0.0})
    measured = [e for e in report.advice + report.advice_refuted if e.measured is not None]
    assert len(measured) == 1
    assert report.advice_not_run and all(REACH_FURTHER in e.reason for e in report.advice_not_run)
    steps = {s.step: s for s in report.extras.steps}
    assert report.extras.budget_seconds == 0.0 and steps["advice's best candidate"].reached
    assert measured[0].artifact in steps["advice's best candidate"].detail
    table = steps[f"per-tensor table at {report.options.layers.min_samples} samples"]
    assert not table.reached and REACH_FURTHER in table.detail
    assert report.layers is not None and report.layers.samples == 0 and not report.layers.rows
    assert not steps["further candidates"].reached


def test_the_table_s_shared_samples_are_charged_to_the_extras_budget(compared):
    """The table's minimum samples run with the accuracy runs at disable_all (run once, for both): their time
    is the table's, charged to the extras' budget, so a small budget goes to the best candidate, not to more."""
    report, _ = compared("op_zoo_net", extras={"seconds": 0.001})
    layers = report.layers
    assert layers.samples == layers.sampling.reused_samples == report.options.eval_samples and layers.rows
    steps = {s.step: s for s in report.extras.steps}
    assert steps[f"per-tensor table at {report.options.layers.min_samples} samples"].reached
    assert "shared with the accuracy runs" in steps[f"per-tensor table at {report.options.layers.min_samples} samples"].detail
    assert report.extras.spent_seconds >= layers.seconds > 0  # charged
    assert sum(e.measured is not None for e in report.advice + report.advice_refuted) == 1
