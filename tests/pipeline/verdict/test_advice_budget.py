"""Advice within a budget (issue 39): a share of the job's time, candidates by expected gain."""

from __future__ import annotations

from service.pipeline.verdict.advice import Candidate, advice_budget, by_expected_gain
from service.schemas.options import ComparisonOptions

UINT8 = {"ort": {"activation_type": "uint8"}}
SWITCH = {"session": {"session.qdqisint8allowed": "1"}}


def test_the_default_budget_is_a_fifth_of_the_job_so_far_and_a_user_can_raise_it():
    seconds, how = advice_budget(ComparisonOptions(), job_seconds=150.0)
    assert seconds == 30.0 and "budget_share 0.2" in how and "150 s" in how
    assert advice_budget(ComparisonOptions(advice={"budget_share": 0.5}), job_seconds=150.0)[0] == 75.0
    seconds, how = advice_budget(ComparisonOptions(advice={"budget_seconds": 300.0}), job_seconds=150.0)
    assert seconds == 300.0 and how == "options.advice.budget_seconds"


def test_candidates_run_in_order_of_expected_gain():
    qdq = Candidate("ort_qdq", UINT8, "r", blocked=("a", "b", "c", "d"))
    qop = Candidate("ort_qoperator", UINT8, "r")
    switch = Candidate("pt2e_qdq", SWITCH, "r", blocked=tuple(f"n{i}" for i in range(40)))
    few = Candidate("ort_qdq", {"ort": {"activation_type": "uint8", "reduce_range": True}}, "r", blocked=("a",))
    # QOperator's s8s8 kernels: the slowest file first (the most a change to it can save), the session
    # switch (refuted by measurement on x86) after every uint8 re-quantization whatever it blocks
    order = by_expected_gain([switch, few, qdq, qop], {"ort_qdq": 5.0, "ort_qoperator": 15.0, "pt2e_qdq": 40.0})
    assert order == [qop, qdq, few, switch]
