"""Advice: the budget, and the hook other candidates (per-tensor error, issue 15) enter through."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from service.schemas.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.advice.advice import (AdviceContext, Candidate, advice_plan, candidates_from_blockers,
                                             measured_advice, timed_advice)
from service.pipeline.runtime.level_graphs import level_graph_digest
from service.schemas.advice import AdviceFigures


def _ctx(workdir, report, **kw) -> AdviceContext:
    shape = report.model.resolved_input_shapes["x"]
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    art = workdir / "artifacts"
    paths = {a: art / f"{a}.onnx" for a in ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator")}
    return AdviceContext(artifact_paths=paths, ort_input=paths["fp32"], ort_settings=resolved_ort_settings(
        ComparisonOptions()), calibration=feeds, evaluation=feeds, input_names=["x"], calibration_cache=None,
        runs=5, warmup=1, **kw)


def test_a_zero_budget_reruns_the_best_candidate_only_and_says_so(compared):
    report, workdir = compared("op_zoo_net")
    unfused = {a: report.artifacts[a].optimized["all"].unfused for a in ("pt2e_qdq", "ort_qdq")}
    cands = candidates_from_blockers(unfused, {}, ort_settings=resolved_ort_settings(ComparisonOptions()),
                                     int8_allowed=False, vnni=True)
    assert cands
    plan = advice_plan(cands, _ctx(workdir, report, budget_seconds=0))
    plan.work()
    not_run = plan.not_run
    proposed, refuted = timed_advice(plan)
    # the first candidate is measured whatever the budget (issue 47) ...
    assert [e.change for e in proposed + refuted if e.measured is not None] == [cands[0].change]
    # ... and every other one the budget left out is listed, with the reason (issue 39): none is dropped
    assert [e.change for e in not_run] == [c.change for c in cands[1:]] and len(cands) > 1
    assert all(e.measured is None and "not re-run" in e.reason and "options.extras.seconds" in e.reason
               for e in not_run)


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


def test_a_measured_candidate_sizes_the_budget_for_the_next(compared):
    """Without a latency figure the estimate of a session candidate was 0 s, so candidates ran past the
    budget (DNSMOS: 74-99 s of 60 with latency off). The slowest candidate measured so far is now the
    estimate: a budget that fits one candidate and a little more measures one, not two."""
    report, workdir = compared("op_zoo_net")
    cand = Candidate("pt2e_qdq", {"session": {"session.qdqisint8allowed": "1"}}, "int8 on x86")
    # The fastest of two runs: on a loaded machine a first run alone came out 1.7x slower than the
    # next call's, so the budget below fitted two (CI beside the corpus).
    proposed, refuted = measured_advice([cand, cand], _ctx(workdir, report, budget_seconds=120))
    one = min(e.measured.seconds for e in proposed + refuted if e.measured)
    proposed, refuted = measured_advice([cand, cand], _ctx(workdir, report, budget_seconds=1.2 * one + 1.0))
    assert sum(e.measured is not None for e in proposed + refuted) == 1


def test_dedicated_qdq_pairs_are_merged_back_by_cse(tmp_path):
    """Why DedicatedQDQPair is refuted on x86. Oracle: ORT's saved basic graph. quantize_static writes
    one Q/DQ pair per reader of a shared tensor; CommonSubexpressionElimination merges the identical
    QuantizeLinear back into one (which then feeds several DQs, so QDQS8ToU8Transformer leaves it
    int8); with CSE off the pairs stay, and the producer's output is read by several Q
    (``output_quantized_twice``)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from service.pipeline.ort.sessions import session_options_for

    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), f"w{i}") for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["y"], ["s"], name="sig"),
             helper.make_node("Mul", ["y", "s"], ["z"], name="mul"),
             helper.make_node("Conv", ["z", "w2"], ["out"], name="conv2", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])], w)
    fp32 = tmp_path / "silu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    q = tmp_path / "silu.q.onnx"
    quantize_static(str(fp32), str(q), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, extra_options={"DedicatedQDQPair": True})

    def q_on_y(disabled):
        out = tmp_path / f"basic{len(disabled)}.onnx"
        so = session_options_for("basic", optimized_model_path=out, disabled_optimizers=disabled)
        ort.InferenceSession(str(q), so, providers=["CPUExecutionProvider"])
        return sum(1 for n in onnx.load(str(out)).graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "y")

    assert q_on_y([]) == 1
    assert q_on_y(["CommonSubexpressionElimination"]) == 2


def test_the_before_figures_are_the_report_s_own(compared):
    """A re-run does not measure the artifact as is again: 'before' is the levels stage's figure at
    the advice level (and 'after' is taken against the reference those figures used)."""
    report, _ = compared("op_zoo_net")
    level = ComparisonOptions().advice.level
    measured = [a for a in report.advice + report.advice_refuted if a.measured]
    assert measured
    for a in measured:
        ol = report.artifacts[a.artifact].optimized[level]
        assert a.measured.before.sqnr_db == ol.numerics.worst_sqnr_db
        assert a.measured.before.int8_coverage == ol.int8_coverage


def test_timing_a_candidate_stops_once_every_run_is_far_slower_than_every_run_before():
    import time as _time

    from service.pipeline.advice.advice import GIVE_UP_PAIRS, GIVE_UP_RATIO, _interleaved_ms

    class Sleeps:  # the timing loop's own logic; what a session computes does not matter here
        def __init__(self, seconds):
            self.seconds, self.calls = seconds, 0

        def run(self, *_):
            self.calls += 1
            _time.sleep(self.seconds)

    # 20 ms against 15x that: a loaded machine delays a sleep by milliseconds (1 ms sleeps failed
    # this under a busy CI run), never by the 280 ms it would take to hide the gap
    before, slow = Sleeps(0.02), Sleeps(0.02 * GIVE_UP_RATIO * 10)
    (_, fastest_before), (_, fastest_after), pairs = _interleaved_ms(before, slow, {}, runs=20, warmup=1)
    assert pairs == GIVE_UP_PAIRS and slow.calls == 1 + GIVE_UP_PAIRS
    assert fastest_after > GIVE_UP_RATIO * fastest_before
    # A graph under SHORT_RUN_MS gets the levels stage's extra warm-up, before and after alike (a 'before'
    # session warmed by earlier candidates against a cold 'after' read a tiny graph's change as slower).
    from service.pipeline.runtime.latency import SHORT_RUN_WARMUP

    same_a, same_b = Sleeps(0.001), Sleeps(0.001)
    *_, pairs = _interleaved_ms(same_a, same_b, {}, runs=8, warmup=1)
    assert pairs == 8 and same_a.calls == same_b.calls == 1 + SHORT_RUN_WARMUP + 8


def test_timing_a_candidate_stops_once_more_pairs_cannot_change_its_verdict():
    import time as _time

    from service.pipeline.advice.advice import (
        MIN_PAIRS,
        MIN_SPEEDUP,
        AdviceFigures,
        Candidate,
        _interleaved_ms,
        _latency_settled,
    )

    speed = Candidate("ort_qdq", {"ort": {"activation_type": "uint8"}}, "r", blocked=("a", "b", "c"))
    before = AdviceFigures(int8_coverage=0.2, sqnr_db=30.0, level="all")
    fused = AdviceFigures(int8_coverage=1.0, sqnr_db=30.0, level="all")
    settled = _latency_settled(speed, before, fused)
    # Twice as fast in every pair: adopted whatever more pairs give. Slower in every pair: refuted.
    assert settled([10.0] * MIN_PAIRS, [5.0] * MIN_PAIRS)
    assert settled([10.0] * MIN_PAIRS, [12.0] * MIN_PAIRS)
    # Pairs on both sides of the 0.9x threshold: more pairs can still move the verdict.
    assert not settled([10.0] * MIN_PAIRS, [8.5, 9.5, 8.6, 9.4, 9.0])
    # Coverage unchanged: latency still decides (coverage is never a veto), so timing goes on.
    assert not _latency_settled(speed, before, before)([10.0] * MIN_PAIRS, [8.5, 9.5, 8.6, 9.4, 9.0])
    # A speed candidate losing more than the allowed SQNR is refuted whatever the timing gives.
    lossy = AdviceFigures(int8_coverage=1.0, sqnr_db=20.0, level="all")
    assert _latency_settled(speed, before, lossy)([10.0], [5.0])

    class Sleeps:
        def __init__(self, seconds):
            self.seconds, self.calls = seconds, 0

        def run(self, *_):
            self.calls += 1
            _time.sleep(self.seconds)

    # 30 ms against 3 ms: a wake-up delay of a loaded machine (a few ms) cannot bring a pair near 0.9x.
    slow, fast = Sleeps(0.030), Sleeps(0.003)
    (med_b, _), (med_a, _), pairs = _interleaved_ms(slow, fast, {}, runs=20, warmup=1, settled=settled)
    assert pairs == MIN_PAIRS and fast.calls == 1 + MIN_PAIRS
    assert med_a < MIN_SPEEDUP * med_b


def test_two_threads_make_each_candidate_once_with_the_numbers_one_thread_makes(compared):
    """AdvicePlan.work on two threads at once (the spine's second core, then its first after the per-tensor
    table): every candidate is made exactly once, in candidate order, with the same SQNR and coverage."""
    import threading

    from service.pipeline.advice.advice import advice_plan

    report, workdir = compared("op_zoo_net")
    unfused = {a: report.artifacts[a].optimized["all"].unfused for a in ("pt2e_qdq", "ort_qdq")}
    cands = candidates_from_blockers(unfused, {}, ort_settings=resolved_ort_settings(ComparisonOptions()),
                                     int8_allowed=False, vnni=True)
    assert len(cands) >= 2

    def made(plan):
        return [(r.candidate, r.after.sqnr_db, r.after.int8_coverage) for r in plan.ready]

    alone = advice_plan(cands, _ctx(workdir, report, budget_seconds=600))
    alone.work()
    shared = advice_plan(cands, _ctx(workdir, report, budget_seconds=600))
    workers = [threading.Thread(target=shared.work) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert made(shared) == made(alone) and [c for c, _, _ in made(alone)] == cands
    assert shared.unmeasured() == ([], [])
    for plan in (alone, shared):
        shutil.rmtree(plan.tmp)


def test_the_uint8_requantizations_are_measured_first(compared):
    """A 72 MB CenterNet spent its whole advice budget on pt2e_qdq's s8s8 session switch (3x slower, refuted)
    and left both uint8 re-quantizations "not re-run": the candidates x86 needs now come first."""
    report, _ = compared("op_zoo_net")
    unfused = {a: report.artifacts[a].optimized["all"].unfused for a in ("pt2e_qdq", "ort_qdq", "ort_qoperator")}
    cands = candidates_from_blockers(unfused, {}, ort_settings=resolved_ort_settings(ComparisonOptions()),
                                     int8_allowed=False, vnni=True)
    kinds = ["uint8" if c.change.get("ort", {}).get("activation_type") == "uint8" else
             "session" if "session" in c.change else "other" for c in cands]
    assert "uint8" in kinds and "session" in kinds
    assert kinds == sorted(kinds, key=["uint8", "session", "other"].index)


@pytest.mark.parametrize("change, same", [
    ({"session": {"session.intra_op.allow_spinning": "0"}}, True),  # a thread setting: the same graph
    ({"session": {"session.disable_quant_qdq": "1"}}, False),  # no QDQ fusion: another graph
])
def test_a_change_orts_graph_does_not_show_is_refuted_without_runs(compared, change, same):
    """The graph ORT saves with the change is compared with the levels stage's graph of the artifact as is
    (the same canonical SHA-256): the same graph runs the same kernels on the same weights, so it is
    refuted as changing nothing and neither run nor timed; another graph is measured as before."""
    report, workdir = compared("op_zoo_net")
    ol = report.artifacts["ort_qdq"].optimized["all"]
    before = {"ort_qdq": AdviceFigures(int8_coverage=ol.int8_coverage, sqnr_db=ol.numerics.worst_sqnr_db, level="all")}
    ctx = _ctx(workdir, report, budget_seconds=60, before=before,
               before_digest={"ort_qdq": level_graph_digest(ol.graph_sha256, ol.weights_sha256)})
    proposed, refuted = measured_advice([Candidate("ort_qdq", change, "a change")], ctx)
    (entry,) = proposed + refuted
    m = entry.measured
    if same:
        assert entry in refuted and "the very same graph at all" in entry.reason
        assert m.after == m.before and m.after.latency_ms is None and "SHA-256" in m.how
    else:
        assert m.after.latency_ms and m.before.latency_ms  # made, run and timed
        assert "very same graph" not in entry.reason


def _ratio(m, key: str) -> float:
    return getattr(m.after, key) / getattr(m.before, key)


def test_no_measured_win_is_refuted_and_each_refutation_states_what_was_measured(compared):
    """A candidate at <= 0.8x the time (by the median and by the fastest run) with SQNR within 0.5 dB is
    adopted. op_zoo_net's ort_qoperator uint8 ran 0.64x at 0 dB and was refuted as 'int8 coverage stays
    1.00: no blocked node fused': its one blocked node is a Transpose, outside the coverage count, and it
    did fuse. Which blocked nodes fused is reported, counted in ORT's saved graph; never a veto."""
    report, _ = compared("op_zoo_net")
    measured = [e for e in report.advice + report.advice_refuted if e.measured and e.measured.after.latency_ms]
    assert measured
    for e in measured:
        m = e.measured
        sq_before, sq_after = (np.inf if f.sqnr_db is None else f.sqnr_db for f in (m.before, m.after))
        if _ratio(m, "latency_ms") <= 0.8 and _ratio(m, "latency_min_ms") <= 0.8 and abs(sq_after - sq_before) <= 0.5:
            # An alternative for the same artifact that measured better still wins over it (and says so).
            assert e.adopted or "superseded by" in e.reason, (e.change, e.reason)
    # Whether a given run measures a win depends on the machine's load (uint8 ran 0.61-0.8x here); the
    # reasons below do not: ort_qoperator uint8 (coverage 1.0 -> 1.0) and DedicatedQDQPair (coverage
    # unchanged) were refuted for coverage on every run before.
    for e in measured:
        assert "coverage" not in e.reason.split("refuted:")[-1], e.reason  # not a rule: never a reason
    for e in measured:
        if e.blocked_fused is not None:
            assert f"{len(e.blocked_fused)} of {e.blocked_nodes} blocked node" in e.reason
            assert set(e.blocked_fused) <= set(r.node for r in report.artifacts[e.artifact].optimized["all"].unfused)


@pytest.mark.parametrize("after, adopted, says", [
    # resnet18 ort_qoperator uint8: 135 -> 10 ms at -0.1 dB, coverage 1.0 before and after (one blocked Reshape)
    (dict(latency_ms=10.0, latency_min_ms=9.5, sqnr_db=29.9), True, []),
    (dict(latency_ms=12.0, latency_min_ms=11.0, sqnr_db=30.0), False, ["1.20x by the median", "1.22x"]),
    (dict(latency_ms=5.0, latency_min_ms=5.0, sqnr_db=27.0), False, ["SQNR 27.0 dB vs 30.0 dB before"]),
    (dict(latency_ms=12.0, latency_min_ms=11.0, sqnr_db=27.0), False, ["1.20x by the median", "SQNR 27.0 dB"]),
], ids=["faster at coverage 1.0: adopted", "slower: refuted by time", "lossy: refuted by SQNR", "both, both said"])
def test_the_adopt_rule_reads_speed_and_accuracy_only(after, adopted, says):
    from service.pipeline.advice.advice import _supported, _why_not

    c = Candidate("ort_qoperator", {"ort": {"activation_type": "uint8"}}, "r", blocked=("node_reshape",))
    before = AdviceFigures(int8_coverage=1.0, latency_ms=10.0, latency_min_ms=9.0, sqnr_db=30.0, level="all")
    after = AdviceFigures(int8_coverage=1.0, level="all", **after)
    if after.latency_ms == 10.0:
        before = before.model_copy(update={"latency_ms": 135.0, "latency_min_ms": 130.0})
    assert _supported(c, before, after) == adopted
    why = _why_not(c, before, after)
    assert all(s in why for s in says) and ("coverage" not in why)
    if not any("SQNR" in s for s in says):
        assert "SQNR" not in why
    if not any("median" in s for s in says):
        assert "median" not in why
