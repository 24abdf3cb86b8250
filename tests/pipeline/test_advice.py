"""Advice: the budget, and the hook other candidates (per-tensor error, issue 15) enter through."""

from __future__ import annotations

import numpy as np

from service.pipeline.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.verdict.advice import AdviceContext, Candidate, candidates_from_blockers, measured_advice


def _ctx(workdir, report, **kw) -> AdviceContext:
    shape = report.model.resolved_input_shapes["x"]
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    art = workdir / "artifacts"
    paths = {a: art / f"{a}.onnx" for a in ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator")}
    return AdviceContext(artifact_paths=paths, ort_input=paths["fp32"], ort_settings=resolved_ort_settings(
        ComparisonOptions()), calibration=feeds, evaluation=feeds, input_names=["x"], calibration_cache=None,
        runs=5, warmup=1, **kw)


def test_a_zero_budget_reruns_nothing_and_says_so(compared):
    report, workdir = compared("op_zoo_net")
    unfused = {a: report.artifacts[a].optimized["all"].unfused for a in ("pt2e_qdq", "ort_qdq")}
    cands = candidates_from_blockers(unfused, {}, ort_settings=resolved_ort_settings(ComparisonOptions()),
                                     int8_allowed=False, vnni=True)
    assert cands
    proposed, refuted = measured_advice(cands, _ctx(workdir, report, budget_seconds=0))
    assert not refuted and all(e.measured is None for e in proposed)
    # only the blockers-backed uint8 change is listed unmeasured; the refutable ones are dropped
    assert [e.change for e in proposed] == [{"ort": {"activation_type": "uint8"}}]
    assert "not re-run" in proposed[0].reason


def test_an_extra_candidate_is_measured_like_the_others(compared):
    """The hook for per-tensor error: any Candidate, e.g. nodes_to_exclude, is re-run for real."""
    report, workdir = compared("op_zoo_net")
    conv = next(r.node for r in report.artifacts["ort_qdq"].optimized["all"].unfused if r.op_type == "Conv")
    extra = Candidate("ort_qdq", {"ort": {"nodes_to_exclude": [conv]}}, "its error dominates", kind="accuracy")
    proposed, refuted = measured_advice([extra], _ctx(workdir, report, budget_seconds=60))
    (entry,) = proposed + refuted
    m = entry.measured
    assert m is not None and m.before.latency_ms and m.after.latency_ms and m.seconds
    assert entry.adopted == (entry in proposed)
