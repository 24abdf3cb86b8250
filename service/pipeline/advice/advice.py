"""Advice that is measured: what to change so more of the model runs on int8 kernels, re-run for real.

Candidates come from the blockers (``inspect/blockers.py``) and from the int8 kernels' activation
dtype. Candidates are re-run within the extras' budget, which advice shares with the per-tensor table
(pipeline/extras_budget.py), in order of expected gain (``by_expected_gain``): the first is always
measured, those that do not fit are listed with the reason (``AdvicePlan.not_run``,
``Report.advice_not_run``). The ORT path is quantized
again with the changed settings (the calibration ranges are reused from the job's cache: they are
float ranges, the same for int8 and uint8), a session is created at ``options.advice.level``, the
evaluation samples run, and the latency loop runs with the levels stage's threads and run count.
``before`` is measured the same way, back to back, on the artifact as it is, so the two figures
are comparable. Two phases: ``AdvicePlan.work`` makes each candidate's file and numbers (nothing
timed, so the spine may run it on two threads, beside the per-tensor table), ``timed_advice`` then
times each candidate alone. A candidate is adopted when it measures better: the speed rule (after/before
at most ``MIN_SPEEDUP`` by the median and by the fastest run) and the accuracy rule (at most
``MAX_SQNR_LOSS_DB`` less SQNR) both hold. Which of the blocked nodes it addresses fused is counted in
ORT's saved graph and reported (``blocked_fused``), never a veto. The others are kept in
``advice_refuted`` with their figures and every rule they fail, in those figures.

On x86 two candidates that look plausible from the source are refuted by measurement and are
therefore measured, never assumed: ``session.qdqisint8allowed=1`` fuses every node but selects
the s8s8 kernels, which are slower on x86; ``DedicatedQDQPair`` writes one Q/DQ pair per reader,
but ORT's CommonSubexpressionElimination (Level1) merges the identical QuantizeLinear back before
QDQS8ToU8Transformer runs, and without CSE the producer's output would be read by several
QuantizeLinear, which the selectors refuse (``output_quantized_twice``).

Hook for per-tensor error (issue 15, ``layers/layers.py``): give ``measured_advice`` more
``Candidate``s, e.g. ``Candidate(artifact="ort_qdq", change={"ort": {"nodes_to_exclude": [...]}},
reason="the 3 nodes whose error dominates ...", kind="accuracy")``. Accuracy candidates are
adopted when SQNR improves by at least ``MIN_SQNR_GAIN_DB`` at no more than ``MAX_SLOWDOWN``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from service.pipeline.environment import cpu_info
from service.pipeline.extras_budget import REACH_FURTHER, ExtrasBudget
from service.pipeline.inspect.blockers import unfused_nodes
from service.pipeline.ort.targets import int8_allowed_in
from service.pipeline.quantize.ort_quant import quantized_by_ort
from service.pipeline.runtime.latency import SHORT_RUN_MS, SHORT_RUN_WARMUP, median_ci
from service.pipeline.runtime.level_graphs import DATA_FILE, GRAPH_FILE, fingerprint, level_graph_digest
from service.pipeline.runtime.numerics import concat_runs, worst_elementwise_sqnr
from service.pipeline.runtime.parallel_runs import Cores, runs_on_cores
from service.pipeline.advice.expected_gain import expected_gain_ms
from service.pipeline.advice.recipe import settings_with_change
from service.pipeline.ort.sessions import session_for, session_options_for, session_with_options
from service.pipeline.vocabulary import graph_from_path, int8_coverage
from service.schemas.advice import AdviceEntry, AdviceFigures, AdviceMeasured, UnfusedNode

__all__ = ["Candidate", "AdviceContext", "AdvicePlan", "candidates_from_blockers", "measured_advice", "advice_plan",
           "timed_advice", "time_ready", "advice_plan_for_job", "by_expected_gain", "level_figures"]

log = logging.getLogger(__name__)
DTYPE_BLOCKERS = {"io_dtype_mismatch", "int8_activation_on_x86"}
# after/before latency: a speed candidate must be at least 10% faster by the median AND by the fastest
# run (a shared 2-core machine inflates single medians by 2-10x; noise only ever adds time).
MIN_SPEEDUP = 0.90
MAX_SQNR_LOSS_DB = 1.0  # ... and lose no more than this much SQNR
MIN_SQNR_GAIN_DB = 1.0  # an accuracy candidate must gain at least this much
MAX_SLOWDOWN = 1.10
_SERIAL = itertools.count()


@dataclass(frozen=True)
class Candidate:
    artifact: str  # ort_qdq | ort_qoperator (changes to quantize_static) or any artifact (session config)
    change: dict[str, Any]  # {"ort": {...quantize_static settings...}} and/or {"session": {key: value}}
    reason: str
    kind: str = "speed"  # speed | accuracy: which figure must improve
    blocked: tuple[str, ...] = ()  # names of the unfused nodes (levels stage, at ctx.level) the change addresses

    @property
    def blocked_nodes(self) -> int:
        return len(self.blocked)


@dataclass(frozen=True)
class AdviceContext:
    """What a re-run needs from the job; compare.py fills it while the scratch folder still exists."""

    artifact_paths: dict[str, Path]  # fp32 and every ok artifact
    ort_input: Path | None  # the (pre-processed) fp32 file the ORT paths quantized
    ort_settings: dict[str, Any]  # resolved quantize_static settings
    calibration: list[dict[str, np.ndarray]]
    evaluation: list[dict[str, np.ndarray]]
    input_names: list[str]
    calibration_cache: Path | None
    level: str = "all"
    runs: int = 10
    warmup: int = 2
    threads: int = 1
    # The extras' budget, shared with the per-tensor table (pipeline/extras_budget.py); None: a budget of
    # its own, ``budget_seconds`` from the first ``work`` call (a plan made outside a job).
    budget: ExtrasBudget | None = None
    budget_seconds: float = 60.0
    budget_how: str = "options.extras.seconds"  # how the budget was set, said when a candidate does not fit
    cores: Cores = 1  # the job's cores: the SQNR runs (untimed) go on all of them (runtime/parallel_runs.py)
    quantize_seconds: dict[str, float] | None = None  # per artifact, for the budget estimate
    # From the levels stage, so a re-run does not measure again what the job already has: the
    # fp32 outputs every SQNR in the report is taken against, and each artifact's coverage and
    # worst SQNR at ``level`` (the "before" figures); its median latency there sizes the budget.
    reference: list[np.ndarray] | None = None
    before: dict[str, AdviceFigures] | None = None
    latency_ms: dict[str, float] | None = None
    data_dependent: frozenset[int] = frozenset()  # output positions the report's worst SQNR leaves out
    # artifact -> the digest of the graph ORT wrote for it at ``level`` in the levels stage
    # (``LevelGraphFiles.digest``): a candidate ORT rewrites into that very graph changes nothing.
    before_digest: dict[str, str] | None = None
    # The job's ORT session config entries (options.ort_session): every session advice makes has them, as the
    # levels stage's have, and a candidate's own entries are merged over them.
    session_config: dict[str, str] = field(default_factory=dict)


def candidates_from_blockers(unfused: dict[str, list[UnfusedNode]], kernel_dtypes: dict[str, dict[str, int]], *,
                             ort_settings: dict[str, Any], int8_allowed: bool, vnni: bool = True) -> list[Candidate]:
    """``unfused``: artifact -> rows at the level advice measures; ``kernel_dtypes``: artifact ->
    the int8 kernels' activation dtypes there. Order = measuring priority."""
    out: list[Candidate] = []
    if int8_allowed:
        return out
    # PT2E's XNNPACK config writes int8 activations and has no uint8 option; only ORT's session switch
    # applies to its file. It is measured so the report can show what x86 costs this model.
    # The same holds for the tool paths (NNCF, ModelOpt, Quark) and the files users bring: their file is not
    # made again here, so the session switch is the change advice can measure on it.
    for art in (a for a in unfused if a not in ("ort_qdq", "ort_qoperator")):
        file_blocked = [r for r in unfused[art] if r.blocker in DTYPE_BLOCKERS]
        if file_blocked:
            out.append(Candidate(art, {"session": {"session.qdqisint8allowed": "1"}},
                                 "ORT's switch to fuse int8 activations on x86 (every selector accepts them)",
                                 blocked=_names(file_blocked)))
    for art in ("ort_qdq", "ort_qoperator"):
        if art not in unfused and art not in kernel_dtypes:
            continue
        rows = unfused.get(art, [])
        blocked = [r for r in rows if r.blocker in DTYPE_BLOCKERS]
        s8_kernels = kernel_dtypes.get(art, {}).get("int8", 0)
        if ort_settings.get("activation_type") != "int8" or not (blocked or s8_kernels):
            continue
        ops = Counter(r.op_type for r in blocked)
        if blocked:
            reason = (f"{len(blocked)} nodes stay float ({', '.join(f'{n} {op}' for op, n in ops.most_common(4))}) "
                      "because QDQS8ToU8Transformer turns single-reader int8 Q/DQ pairs to uint8 and leaves "
                      "shared ones int8; with uint8 activations in the file there is nothing to convert")
        else:
            reason = (f"{s8_kernels} int8 kernels take int8 activations: on x86 that is MLAS's s8s8 path, "
                      "slower than u8s8")
        out.append(Candidate(art, {"ort": {"activation_type": "uint8"}}, reason, blocked=_names(blocked)))
        if not vnni and not ort_settings.get("reduce_range"):
            # Without VNNI, MLAS's u8s8 kernel multiplies with vpmaddubsw, whose 16-bit pair sums
            # saturate for large u8 x s8 products; 7-bit weights (reduce_range) keep them in range.
            out.append(Candidate(art, {"ort": {"activation_type": "uint8", "reduce_range": True}},
                                 reason + "; this CPU has no VNNI, so MLAS's u8s8 kernel (vpmaddubsw) can saturate "
                                 "16-bit sums: 7-bit weights (reduce_range) avoid it", blocked=_names(blocked)))
        if blocked:
            out.append(Candidate(art, {"session": {"session.qdqisint8allowed": "1"}},
                                 "ORT's switch to fuse int8 activations on x86 (every selector accepts them)",
                                 blocked=_names(blocked)))
        if blocked and art == "ort_qdq":
            out.append(Candidate(art, {"ort": {"extra_options": {"DedicatedQDQPair": True}}},
                                 "one Q/DQ pair per reader, so each pair has a single reader for QDQS8ToU8Transformer "
                                 "(ORT's CommonSubexpressionElimination may merge the pairs back)",
                                 blocked=_names(blocked)))
    # The uint8 re-quantizations first: they are what x86 needs and what the budget must reach (on a 0.6 s
    # CNN the s8s8 session switch, 3x slower, took all 60 s and left both unmeasured); the switches and
    # DedicatedQDQPair, which measurement refutes on x86, after them.
    return sorted(out, key=_group)


def _group(c: Candidate) -> int:
    """The uint8 re-quantizations (0), then ORT's session switches (1), then the rest (2)."""
    return 0 if c.change.get("ort", {}).get("activation_type") == "uint8" else 1 if "session" in c.change else 2


def _names(rows: list[UnfusedNode]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.node for r in rows))


def _session(path: Path, ctx: AdviceContext, session_config: dict[str, str], tmp: Path | None):
    """(session at ``ctx.level`` with ``session_config``, the graph ORT saved for it in a folder of ``tmp``
    with its weights beside it, as the levels stage saves its level graphs, so the two digests compare;
    None without ``tmp``: a session made only to be timed saves nothing). The session that saves its
    graph runs the SQNR samples, untimed, with one intra-op thread as the levels stage's accuracy runs;
    the one made only to be timed has the latency protocol's threads."""
    saved = tmp / f"{path.stem}.{ctx.level}.{next(_SERIAL)}" / GRAPH_FILE if tmp is not None else None
    if saved is not None:
        saved.parent.mkdir(parents=True)
    so = session_options_for(ctx.level, intra_op_threads=1 if saved is not None else ctx.threads,
                             optimized_model_path=saved, session_config=_entries(ctx, session_config),
                             external_initializers_file=DATA_FILE if saved is not None else None)
    return session_with_options(path, so), saved


def _entries(ctx: AdviceContext, session_config: dict[str, str]) -> dict[str, str]:
    """The ORT session config entries of a session advice makes: the job's, with a candidate's own over them."""
    return {**ctx.session_config, **{k: str(v) for k, v in session_config.items()}}


def _figures(session, saved: Path, ctx: AdviceContext, reference: list[np.ndarray],
             artifact: str, session_config: dict[str, str]) -> tuple[AdviceFigures, frozenset[str]]:
    """Figures without latency: int8 coverage counted over ORT's saved graph (``vocabulary.int8_coverage``,
    as the levels stage counts it), SQNR on the eval samples; and the names of the nodes ORT runs in
    float in that graph (``blockers.unfused_nodes``, as the levels stage finds them, under the int8 rule
    the session's entries, ``session_config`` over the job's, made it run with)."""
    graph = graph_from_path(saved, lazy=True)
    int8_allowed = int8_allowed_in(_entries(ctx, session_config))
    still_float = frozenset(r.node for r in unfused_nodes(graph, level=ctx.level, int8_allowed=int8_allowed,
                                                          pt2e=artifact == "pt2e_qdq"))
    outputs = concat_runs(runs_on_cores(lambda feed: session.run(None, feed), ctx.evaluation, ctx.cores))
    return AdviceFigures(int8_coverage=int8_coverage(graph).coverage,
                         sqnr_db=worst_elementwise_sqnr(reference, outputs, ctx.data_dependent),
                         level=ctx.level), still_float



# A candidate whose every timed run is this much slower than every run of the artifact as is, after
# this many alternated pairs, fails both the speed (<= MIN_SPEEDUP) and the accuracy (<= MAX_SLOWDOWN)
# rule whatever the remaining runs give: timing stops there (s8s8 kernels on an x86 without VNNI run
# 5x slower; 20 more pairs of them were 8-11 s of a resnet18 job).
GIVE_UP_PAIRS = 3
GIVE_UP_RATIO = 1.5
# Fewest alternated pairs behind any advice latency. From there on, timing stops as soon as more pairs
# cannot change the verdict (``_latency_settled``): most candidates on x86 are 1.3-5x apart, which
# five pairs show as clearly as twenty (those twenty were most of the advice stage on resnet18).
MIN_PAIRS = 5

Settled = Callable[[list[float], list[float]], bool]


def _interleaved_ms(a, b, feed, *, runs: int, warmup: int,
                    settled: Settled | None = None) -> tuple[tuple[float, float], tuple[float, float], int]:
    """Median and fastest ms of two sessions timed alternately, run by run (load from other jobs on
    a shared machine then slows both alike instead of whichever happened to run during it), and the
    pairs timed: fewer than ``runs`` when ``b`` is clearly slower (GIVE_UP_RATIO), or once
    ``settled(before_ms, after_ms)`` says more pairs cannot change the verdict (after MIN_PAIRS).
    Both sessions get the same warm-up: ``warmup`` runs each, then, when a warm-up run of either took
    under SHORT_RUN_MS, SHORT_RUN_WARMUP more of each (the levels stage's protocol for so short a graph,
    whose first runs are mostly per-call cost)."""
    def warm(count: int) -> float:
        slowest = 0.0
        for _ in range(count):
            for sess in (a, b):
                t = time.perf_counter()
                sess.run(None, feed)
                slowest = max(slowest, (time.perf_counter() - t) * 1000.0)
        return slowest

    if warm(warmup) < SHORT_RUN_MS:
        warm(SHORT_RUN_WARMUP)
    ta, tb = [], []
    for _ in range(runs):
        for sess, acc in ((a, ta), (b, tb)):
            t = time.perf_counter()
            sess.run(None, feed)
            acc.append((time.perf_counter() - t) * 1000.0)
        if len(ta) >= GIVE_UP_PAIRS and min(tb) > GIVE_UP_RATIO * max(ta):
            break
        if settled is not None and len(ta) >= MIN_PAIRS and settled(ta, tb):
            break
    return (float(np.median(ta)), float(np.min(ta))), (float(np.median(tb)), float(np.min(tb))), len(ta)


def _latency_ratio(median_before: float, fastest_before: float | None, median_after: float,
                   fastest_after: float | None) -> float:
    """The after/before ratio the verdict reads: by the median and by the fastest run, the worse of the two."""
    ratio = median_after / median_before
    return max(ratio, fastest_after / fastest_before) if fastest_before and fastest_after else ratio


def _latency_settled(c: Candidate, before: AdviceFigures, after: AdviceFigures) -> Settled:
    """When timing ``c`` may stop: at once when the SQNR rule already fails (the figure is then shown
    from MIN_PAIRS pairs); otherwise when the distribution-free 95% interval of the per-pair after/before
    ratio lies wholly on the side of the threshold (MIN_SPEEDUP or MAX_SLOWDOWN) where the verdict's own
    ratio already is."""
    threshold = MAX_SLOWDOWN if c.kind == "accuracy" else MIN_SPEEDUP
    if not _sqnr_rule_holds(c, before, after):
        return lambda ta, tb: True

    def settled(ta: list[float], tb: list[float]) -> bool:
        lo, hi = median_ci([b / a for a, b in zip(ta, tb) if a > 0] or [1.0])
        verdict_ratio = _latency_ratio(float(np.median(ta)), min(ta), float(np.median(tb)), min(tb))
        return (hi <= threshold and verdict_ratio <= threshold) or (lo > threshold and verdict_ratio > threshold)

    return settled


def _sq(f: AdviceFigures) -> float:
    return float("inf") if f.sqnr_db is None else f.sqnr_db


def _sqnr_rule_holds(c: Candidate, before: AdviceFigures, after: AdviceFigures) -> bool:
    """The accuracy rule: a speed candidate loses at most MAX_SQNR_LOSS_DB, an accuracy candidate gains
    at least MIN_SQNR_GAIN_DB (worst output vs fp32, exact = infinite)."""
    if c.kind == "accuracy":
        return _sq(after) >= _sq(before) + MIN_SQNR_GAIN_DB
    return _sq(after) >= _sq(before) - MAX_SQNR_LOSS_DB


def _speed_rule_holds(c: Candidate, before: AdviceFigures, after: AdviceFigures) -> bool:
    """The speed rule: after/before at most MIN_SPEEDUP (speed) or MAX_SLOWDOWN (accuracy), by the
    median and by the fastest run alike."""
    if before.latency_ms is None or after.latency_ms is None:
        return False
    ratio = _latency_ratio(before.latency_ms, before.latency_min_ms, after.latency_ms, after.latency_min_ms)
    return ratio <= (MAX_SLOWDOWN if c.kind == "accuracy" else MIN_SPEEDUP)


def _supported(c: Candidate, before: AdviceFigures, after: AdviceFigures) -> bool:
    """Adopted when it measures better: the speed rule and the accuracy rule hold. Which blocked nodes
    fused is reported beside, never a veto: a speed-up ORT gets from a node outside the int8_coverage
    count (an Add, a Reshape) or at coverage 1.0 already is a speed-up all the same."""
    return _speed_rule_holds(c, before, after) and _sqnr_rule_holds(c, before, after)


def _why_not(c: Candidate, before: AdviceFigures, after: AdviceFigures) -> str:
    """Every rule the measurement fails, each with the figures that fail it."""
    def db(x):
        return "exact" if x is None else f"{x:.1f} dB"

    reasons = []
    if before.latency_ms is None or after.latency_ms is None:
        reasons.append("not timed")
    elif not _speed_rule_holds(c, before, after):
        threshold = MAX_SLOWDOWN if c.kind == "accuracy" else MIN_SPEEDUP
        median = after.latency_ms / before.latency_ms
        fastest = (f", fastest {after.latency_min_ms:.3g} vs {before.latency_min_ms:.3g} ms "
                   f"({after.latency_min_ms / before.latency_min_ms:.2f}x)"
                   if before.latency_min_ms and after.latency_min_ms else "")
        reasons.append(f"time {median:.2f}x by the median ({after.latency_ms:.3g} vs {before.latency_ms:.3g} ms)"
                       f"{fastest}, over the {threshold:g}x the rule allows")
    if not _sqnr_rule_holds(c, before, after):
        if c.kind == "accuracy":
            reasons.append(f"SQNR {db(after.sqnr_db)} vs {db(before.sqnr_db)} before: less than the "
                           f"{MIN_SQNR_GAIN_DB:g} dB gain the rule asks")
        else:
            reasons.append(f"SQNR {db(after.sqnr_db)} vs {db(before.sqnr_db)} before: more than the "
                           f"{MAX_SQNR_LOSS_DB:g} dB loss the rule allows")
    return "; ".join(reasons)


def _fused_text(c: Candidate, fused: list[str] | None, level: str) -> str:
    """'k of n blocked nodes fused (names)', counted in ORT's saved graph; '' without blocked nodes."""
    if not c.blocked or fused is None:
        return ""
    names = ", ".join(fused[:4]) + (f" and {len(fused) - 4} more" if len(fused) > 4 else "")
    return (f"{len(fused)} of {c.blocked_nodes} blocked node{'s' if c.blocked_nodes != 1 else ''} fused"
            + (f" ({names})" if fused else "") + f" in the graph ORT saved at {level}")


def _best_per_artifact(entries: list[AdviceEntry]) -> tuple[list[AdviceEntry], list[AdviceEntry]]:
    """Alternatives for one artifact (uint8, uint8 + reduce_range, ...): keep the best measured one
    (highest SQNR, then fastest); the others are kept as refuted, naming the one that won."""
    def score(e: AdviceEntry):
        f = e.measured.after
        return (float("inf") if f.sqnr_db is None else f.sqnr_db, -(f.latency_ms or 0.0))

    keep, rest = [], []
    for art in dict.fromkeys(e.artifact for e in entries):
        mine = [e for e in entries if e.artifact == art]
        measured = [e for e in mine if e.measured is not None]
        best = max(measured, key=score) if measured else None
        for e in mine:
            if e is best or e.measured is None:
                keep.append(e)
            else:
                rest.append(e.model_copy(update={"adopted": False, "reason": f"{e.reason}; superseded by "
                                                 f"{best.change}: {_better(best.measured.after, e.measured.after)}"}))
    return keep, rest


def _better(best: AdviceFigures, other: AdviceFigures) -> str:
    """Why ``best`` won, in its figures (the order of ``_best_per_artifact``'s score)."""
    def db(x):
        return "exact" if x is None else f"{x:.2f} dB"

    if _sq(best) > _sq(other):
        return f"SQNR {db(best.sqnr_db)} there vs {db(other.sqnr_db)} here, measured the same way"
    if (best.latency_ms or 0.0) < (other.latency_ms or 0.0):
        return (f"the same SQNR ({db(best.sqnr_db)}) and a median of {best.latency_ms:.3g} ms there vs "
                f"{other.latency_ms:.3g} ms here, measured the same way")
    return f"the same SQNR ({db(best.sqnr_db)}) and the same median time: the first one measured is kept"


@dataclass
class _Ready:
    """A candidate whose file and numbers exist: what is left is to time it against the artifact as is."""

    candidate: Candidate
    target: Path  # the re-quantized file, or the artifact itself for a session-config change
    before: AdviceFigures
    after: AdviceFigures
    fused: list[str] | None  # the candidate's blocked nodes ORT no longer runs in float (None: it names none)
    seconds: float  # what making the file and the numbers took


def _timing_seconds(ctx: AdviceContext, before_ms: float, after_ms: float) -> float:
    """What timing a candidate costs at most: ``runs`` alternated pairs after ``warmup`` of each."""
    return (ctx.runs + ctx.warmup) * (before_ms + after_ms) / 1000.0


class AdvicePlan:
    """Phase one of the measured advice (``advice_plan`` makes one): each candidate's file (ORT
    re-quantized with the change) and its numbers at ``ctx.level`` (int8 coverage from ORT's saved graph,
    SQNR on the evaluation samples), while the budget lasts. Nothing is timed here, so ``work`` may run on two threads at once (each takes the
    next candidate: the spine's second core, and its first once the per-tensor table is done);
    ``timed_advice`` then times each candidate alone.

    The budget counts, for each candidate made, what making it took plus what timing it will take at most
    (``_timing_seconds``); a candidate that would not fit is listed unmeasured (``not_run``) with the option
    that reaches it. The first candidate (the highest expected gain) is made whatever the budget: a job
    with advice on and a candidate measures at least one."""

    def __init__(self, candidates: Iterable[Candidate], ctx: AdviceContext):
        self.ctx = ctx
        self.beside: str | None = None  # the work phase one ran beside, said in each figure's ``how``
        self.recipe_base = None  # advice/recipe.RecipeBase, set by the advice stage: each entry's recipe
        self.seconds = 0.0  # the time ``work`` ran, on whichever threads (its share of the budget)
        self.timed_seconds = 0.0  # the time ``time_ready`` ran (timing is alone: one thread)
        self.first_seconds = 0.0  # the best candidate's wall time, when the spine made and timed it first
        self.tmp = Path(tempfile.mkdtemp(prefix="qc-advice-"))
        self._todo = list(enumerate(candidates))
        self._made: dict[int, _Ready | AdviceEntry] = {}  # candidate index -> made, or its entry without figures
        self._lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self.budget = ctx.budget or ExtrasBudget(ctx.budget_seconds, ctx.budget_how)
        # Whether a candidate was made ready to time: until one is, the next is made whatever the budget (a
        # candidate that failed, or that ORT rewrites into the very graph it had, measures nothing).
        self._one_ready = False
        self._owed: dict[int, float] = {}  # candidate made, not timed yet -> the seconds its timing will take
        self._timed: dict[int, AdviceEntry] = {}  # candidate timed -> its entry (adopted or refuted)
        self._slowest: dict[bool, float] = {}  # re-quantizes or not -> longest candidate so far (made + timed), s
        self._before: dict[str, tuple[AdviceFigures, float]] = {}  # artifact -> figures, ms per run
        fp32 = ctx.artifact_paths["fp32"]
        self._reference = ctx.reference
        if self._reference is None:  # the report's reference: fp32 as written, no ORT rewrite
            # (without ctx.session_config: at disable_all no entry options.ort_session allows changes anything)
            ref_session = session_for(fp32, "disable_all", intra_op_threads=1)
            self._reference = concat_runs(runs_on_cores(lambda f: ref_session.run(None, f), ctx.evaluation, ctx.cores))
            del ref_session

    def _estimate(self, c: Candidate) -> float:
        """What making and timing ``c`` will take, in seconds."""
        ctx = self.ctx
        known_ms = (ctx.latency_ms or {}).get(c.artifact, 0.0)
        est = (ctx.quantize_seconds or {}).get(c.artifact, 5.0) if "ort" in c.change else 0.0
        est += len(ctx.evaluation) * known_ms / 1000.0 + _timing_seconds(ctx, known_ms, known_ms)
        # A candidate already made is the better estimate (no latency figure without the latency loop,
        # and a busy machine runs slower than the levels stage did): DNSMOS took 74-99 s of a 60 s budget.
        return max(est, self._slowest.get("ort" in c.change, 0.0))

    def reserve_seconds(self) -> float:
        """What the candidates still to come will take (made and timed) within the budget: the per-tensor
        table's further samples leave it to them (pipeline/extras_budget.py)."""
        with self._lock:
            todo = [c for _, c in self._todo if self._runnable(c)]
            need = sum(self._owed.values()) + sum(self._estimate(c) for c in todo)
        return min(need, max(0.0, self.budget.left()))

    def _runnable(self, c: Candidate) -> bool:
        ctx = self.ctx
        return ctx.artifact_paths.get(c.artifact) is not None and not ("ort" in c.change and ctx.ort_input is None)

    def _next(self) -> tuple[int, Candidate] | None:
        """The next candidate that fits the budget; those that do not are settled here."""
        ctx = self.ctx
        while self._todo:
            i, c = self._todo.pop(0)
            if not self._runnable(c):
                continue
            est = self._estimate(c)
            remaining = self.budget.left() - sum(self._owed.values())
            if not self._one_ready or remaining > est + 1.0:
                return i, c
            how = ctx.budget_how if ctx.budget is None else self.budget.how
            self._made[i] = AdviceEntry(
                artifact=c.artifact, change=c.change, blocked_nodes=c.blocked_nodes,
                reason=c.reason + f" (not re-run: {max(0.0, remaining):.0f} s of the extras' budget left, not "
                f"enough for a re-run and its timing (~{est:.0f} s); the budget was "
                f"{self.budget.seconds or 0:.0f} s = {how}: {REACH_FURTHER} to measure it)")
        return None

    def _before_figures(self, artifact: str) -> tuple[AdviceFigures, float]:
        ctx = self.ctx
        with self._lock:
            if artifact in self._before:
                return self._before[artifact]
            known_ms = (ctx.latency_ms or {}).get(artifact, 0.0)
            known = (ctx.before or {}).get(artifact)
            if known is None:  # made once, under the lock: the other thread waits for the same figures
                t1 = time.perf_counter()
                session, saved = _session(ctx.artifact_paths[artifact], ctx, {}, self.tmp)
                known, _ = _figures(session, saved, ctx, self._reference, artifact, {})
                known_ms = known_ms or (time.perf_counter() - t1) * 1000.0 / len(ctx.evaluation)
            self._before[artifact] = (known, known_ms)
            return self._before[artifact]

    def _make(self, c: Candidate) -> tuple[_Ready | AdviceEntry, float]:
        ctx = self.ctx
        t0 = time.perf_counter()
        before, before_ms = self._before_figures(c.artifact)
        target = ctx.artifact_paths[c.artifact]
        if "ort" in c.change:
            target = self.tmp / f"{c.artifact}.advice{next(_SERIAL)}.onnx"

            def quantize() -> None:
                quantized_by_ort(ctx.ort_input, target, ctx.calibration, ctx.input_names,
                                 quant_format="qdq" if c.artifact == "ort_qdq" else "qoperator",
                                 settings=settings_with_change(ctx.ort_settings, c.change["ort"]),
                                 calibration_cache=ctx.calibration_cache)

            # Where the job's calibration ranges are not on disk yet, the first re-quantization writes them
            # and the others read them: it runs under the lock, so no thread reads a file half written.
            with self._cache_lock:
                cached = ctx.calibration_cache is None or ctx.calibration_cache.is_file()
                if not cached:
                    quantize()
            if cached:
                quantize()
        t1 = time.perf_counter()
        session, saved = _session(target, ctx, dict(c.change.get("session", {})), self.tmp)
        if (ctx.before_digest or {}).get(c.artifact) == fingerprint(saved.parent).digest:
            # The same graph runs the same kernels on the same weights: the same outputs at the same
            # speed (as a level ORT writes like the one before, runtime/levels.py). Nothing to run or time.
            return AdviceEntry(
                artifact=c.artifact, change=c.change, adopted=False, blocked_nodes=c.blocked_nodes,
                blocked_fused=[] if c.blocked else None,
                reason=f"{c.reason}; refuted: with this change ORT writes the very same graph at {ctx.level} "
                       "(node for node, the same weights), so nothing runs differently",
                measured=AdviceMeasured(
                    before=before, after=before, seconds=round(time.perf_counter() - t0, 3),
                    how=f"the graph ORT saved at {ctx.level} with the change and the levels stage's graph of the "
                        "artifact as is compared by SHA-256 (node names cleared, nodes sorted; the weights file "
                        "hashed whole): identical, so 'after' is 'before' and neither was run again")), 0.0
        after, still_float = _figures(session, saved, ctx, self._reference, c.artifact, c.change.get("session", {}))
        del session  # timed in phase two, from a session of its own: none is held across the phases
        after_ms = (time.perf_counter() - t1) * 1000.0 / len(ctx.evaluation)  # session creation included
        fused = [n for n in c.blocked if n not in still_float] if c.blocked else None
        return (_Ready(candidate=c, target=target, before=before, after=after, fused=fused,
                       seconds=time.perf_counter() - t0), _timing_seconds(ctx, before_ms, after_ms))

    def work(self, first_only: bool = False) -> None:
        """Make candidates until none is left (``first_only``: until one is ready to time); safe to call from
        two threads at once."""
        t0 = time.perf_counter()
        self.budget.start()
        try:
            while not (first_only and self._one_ready):
                with self._lock:
                    picked = self._next()
                if picked is None:
                    return
                i, c = picked
                try:
                    ready, owed = self._make(c)
                except Exception as e:  # noqa: BLE001 - a candidate that fails to run is refuted, with the reason
                    with self._lock:
                        self._made[i] = AdviceEntry(
                            artifact=c.artifact, change=c.change, adopted=False, blocked_nodes=c.blocked_nodes,
                            reason=f"{c.reason}; re-run failed: {type(e).__name__}: {str(e)[:200]}")
                    continue
                with self._lock:
                    self._made[i] = ready
                    if isinstance(ready, AdviceEntry):  # settled without runs: nothing to time
                        continue
                    self._owed[i] = owed
                    self._one_ready = True
                    key = "ort" in c.change
                    self._slowest[key] = max(self._slowest.get(key, 0.0), ready.seconds + owed)
        finally:
            with self._lock:
                self.seconds += time.perf_counter() - t0

    @property
    def timed(self) -> list[AdviceEntry]:
        """The candidates timed so far, in candidate order (the first is the best candidate)."""
        return [e for _, e in sorted(self._timed.items())]

    @property
    def ready(self) -> list[_Ready]:
        """The candidates made and not timed yet, in candidate order."""
        return [m for _, m in self._untimed()]

    def _untimed(self) -> list[tuple[int, _Ready]]:
        return [(i, m) for i, m in sorted(self._made.items()) if isinstance(m, _Ready) and i not in self._timed]

    def unmeasured(self) -> tuple[list[AdviceEntry], list[AdviceEntry]]:
        """(not re-run for the budget, refuted because their re-run failed), in candidate order."""
        entries = [m for _, m in sorted(self._made.items()) if isinstance(m, AdviceEntry)]
        return [e for e in entries if e.adopted is not False], [e for e in entries if e.adopted is False]

    @property
    def not_run(self) -> list[AdviceEntry]:
        """The candidates the budget left out, each with the reason (``Report.advice_not_run``)."""
        return self.unmeasured()[0]


def advice_plan(candidates: Iterable[Candidate], ctx: AdviceContext) -> AdvicePlan | None:
    """A plan whose ``work`` makes the candidates; None when there is nothing to measure."""
    candidates = list(candidates)
    if not candidates or "fp32" not in ctx.artifact_paths or not ctx.evaluation:
        return None
    return AdvicePlan(candidates, ctx)


def timed_advice(plan: AdvicePlan | None) -> tuple[list[AdviceEntry], list[AdviceEntry]]:
    """Phase two: each candidate made and not timed yet, timed alternately with the artifact as is, alone
    on the machine (nothing else of the job runs meanwhile); then (proposed, refuted) over every candidate
    of the plan. The plan's files are removed: nothing is timed after this."""
    if plan is None:
        return [], []
    try:
        time_ready(plan)
        timed = plan.timed
        proposed, superseded = _best_per_artifact([e for e in timed if e.adopted])
        return proposed, plan.unmeasured()[1] + [e for e in timed if not e.adopted] + superseded
    finally:
        shutil.rmtree(plan.tmp, ignore_errors=True)


def time_ready(plan: AdvicePlan) -> None:
    """Time the candidates made so far and not timed yet (``timed_advice`` then judges them all): the
    spine times advice's best candidate as soon as it is made, before the per-tensor table."""
    t0 = time.perf_counter()
    for i, r in plan._untimed():
        plan._timed[i] = _timed_entry(plan, r)
        with plan._lock:
            plan._owed.pop(i, None)
    plan.timed_seconds += time.perf_counter() - t0


def _timed_entry(plan: AdvicePlan, r: _Ready) -> AdviceEntry:
    """One candidate timed against the artifact as is; the entry says whether it is adopted, and why not."""
    ctx, c = plan.ctx, r.candidate
    t0 = time.perf_counter()
    try:
        # A new 'before' session per candidate: one kept from the previous candidate has run dozens of
        # times, which a fresh 'after' session has not (a 0.05 ms graph reads 20-40% slower cold).
        before_session = _session(ctx.artifact_paths[c.artifact], ctx, {}, None)[0]
        session = _session(r.target, ctx, dict(c.change.get("session", {})), None)[0]
        ms_before, ms_after, pairs = _interleaved_ms(before_session, session, ctx.evaluation[0],
                                                     runs=ctx.runs, warmup=ctx.warmup,
                                                     settled=_latency_settled(c, r.before, r.after))
        del session, before_session
    except Exception as e:  # noqa: BLE001 - a candidate that fails to run is refuted, with the reason
        return AdviceEntry(artifact=c.artifact, change=c.change, adopted=False, blocked_nodes=c.blocked_nodes,
                           reason=f"{c.reason}; re-run failed: {type(e).__name__}: {str(e)[:200]}")
    b = r.before.model_copy(update={"latency_ms": ms_before[0], "latency_min_ms": ms_before[1]})
    after = r.after.model_copy(update={"latency_ms": ms_after[0], "latency_min_ms": ms_after[1]})
    stopped = f"; {pairs} alternated pairs timed"
    if pairs < MIN_PAIRS:
        stopped += (f": timing stopped there, every run was over {GIVE_UP_RATIO:g}x slower than every run "
                    "of the artifact as is")
    measured = AdviceMeasured(before=b, after=after, how=_timed_how(plan) + stopped,
                              seconds=round(r.seconds + time.perf_counter() - t0, 3))
    ok = _supported(c, b, after)
    fused = _fused_text(c, r.fused, ctx.level)
    reason = c.reason if ok else f"{c.reason}; refuted: {_why_not(c, b, after)}"
    return AdviceEntry(artifact=c.artifact, change=c.change, measured=measured,
                       reason=reason + (f" ({fused})" if fused else ""), adopted=ok,
                       blocked_nodes=c.blocked_nodes, blocked_fused=r.fused)


def _timed_how(plan: AdvicePlan) -> str:
    ctx = plan.ctx
    return (f"re-run in this job at level {ctx.level}: {len(ctx.evaluation)} evaluation samples for SQNR "
            f"(worst output vs the report's fp32 reference; 'before' is the levels "
            f"stage's figure for the artifact as is){f', computed beside {plan.beside}' if plan.beside else ''}; "
            f"int8 coverage and the blocked nodes that fused counted in the graph ORT saved at {ctx.level}; "
            f"latency = median and fastest of {MIN_PAIRS} to {ctx.runs} runs of each session, a new session of "
            f"the artifact as is (before) and of the change (after) per candidate, timed alone and alternately "
            f"after the same warm-up ({ctx.warmup} runs each, {SHORT_RUN_WARMUP} more each when a run takes under "
            f"{SHORT_RUN_MS:g} ms), {ctx.threads} intra-op thread(s), until the 95% interval of the per-pair "
            f"after/before ratio is clear of the verdict's threshold ({MIN_SPEEDUP:g}x for speed, {MAX_SLOWDOWN:g}x "
            f"for accuracy; {MIN_PAIRS} pairs when SQNR decides alone)")


def measured_advice(candidates: Iterable[Candidate], ctx: AdviceContext) -> tuple[list[AdviceEntry], list[AdviceEntry]]:
    """(proposed, refuted): both phases on this thread, one after the other."""
    plan = advice_plan(candidates, ctx)
    if plan is not None:
        plan.work()
    return timed_advice(plan)


def _data_dependent_positions(fp32_levels: dict) -> frozenset[int]:
    """The outputs the levels stage's worst SQNR leaves out (compared by shape after a selection, or judged by
    another figure or by none: ``OutputNumerics.judged_by``, the same for every file): not in any SQNR here
    either, so a candidate's figure and the artifact's compare the same outputs."""
    numerics = next((ol.numerics for ol in fp32_levels.values() if ol.numerics is not None), None)
    return frozenset(k for k, o in enumerate(numerics.outputs if numerics else []) if o.judged_by != "sqnr")


def by_expected_gain(candidates: list[Candidate], latency_ms: dict[str, float],
                     profiles: dict | None = None) -> list[Candidate]:
    """The measuring order: the uint8 re-quantizations first (what x86 needs; ``candidates_from_blockers``
    puts the switches measurement refutes on x86 after them), and within each group the candidate whose
    artifact runs slowest at the advice level first (the most a change to that file can save: QOperator's
    s8s8 kernels ran 3.1x fp32 on CenterNet), then the one that would fuse the most blocked nodes. The
    latencies are the levels stage's measurements; without one an artifact counts as 0 ms. Within a group,
    the time the candidate's nodes take in its artifact's profile (``expected_gain.expected_gain_ms``) comes
    first where ``profiles`` (artifact -> OpProfile at the advice level) has one."""
    profiles = profiles or {}
    return sorted(candidates, key=lambda c: (_group(c), -(expected_gain_ms(c, profiles.get(c.artifact)) or 0.0),
                                             -latency_ms.get(c.artifact, 0.0), -c.blocked_nodes))


@dataclass(frozen=True)
class LevelFigures:
    """What advice reads of the levels stage at its level, per quantized artifact."""

    unfused: dict[str, list[UnfusedNode]]
    kernels: dict[str, dict[str, int]]  # the int8 kernels' activation dtypes
    before: dict[str, AdviceFigures]
    latency_ms: dict[str, float]
    digests: dict[str, str]  # the digest of the graph ORT wrote (``level_graph_digest``)
    profiles: dict = field(default_factory=dict)  # artifact -> OpProfile (runtime/profile.py), where timed


def level_figures(optimized: dict, level: str, *, with_before: bool) -> LevelFigures:
    """``optimized``: artifact -> level -> the levels stage's row. ``with_before``: the accuracy figures are
    against the report's reference (the levels stage's fp32 outputs), so a re-run need not measure them."""
    figures = LevelFigures({}, {}, {}, {}, {})
    for art, per_level in optimized.items():
        ol = per_level.get(level)
        if art == "fp32" or ol is None or ol.error:
            continue
        figures.unfused[art] = list(ol.unfused)
        figures.kernels[art] = dict(ol.kernel_activation_dtypes)
        if ol.numerics is not None and with_before:
            figures.before[art] = AdviceFigures(int8_coverage=ol.int8_coverage, sqnr_db=ol.numerics.worst_sqnr_db,
                                                level=level)
        if ol.latency is not None:
            figures.latency_ms[art] = ol.latency.median_ms
        if ol.profile is not None:
            figures.profiles[art] = ol.profile
        if ol.graph_sha256:
            figures.digests[art] = level_graph_digest(ol.graph_sha256, ol.weights_sha256)
    return figures


def advice_plan_for_job(optimized: dict, ctx: AdviceContext) -> AdvicePlan | None:
    """The spine's first call: the plan of the candidates from the levels stage's blockers at ``ctx.level``
    (``optimized``: artifact -> level -> row), in order of expected gain, to be made within the extras'
    budget (``ctx.budget``) by ``AdvicePlan.work`` (on one thread or two) and timed by ``timed_advice``.
    ``ctx`` comes without the levels stage's figures; they are read here. None when there is nothing to
    measure, or when planning failed (logged)."""
    cpu = cpu_info()
    vnni = bool(cpu.isa.get("avx512_vnni") or cpu.isa.get("avx_vnni") or cpu.isa.get("amx_int8"))
    figures = level_figures(optimized, ctx.level, with_before=ctx.reference is not None)
    candidates = by_expected_gain(candidates_from_blockers(figures.unfused, figures.kernels,
                                                           ort_settings=ctx.ort_settings,
                                                           int8_allowed=int8_allowed_in(ctx.session_config),
                                                           vnni=vnni),
                                  figures.latency_ms, figures.profiles)
    if not candidates:
        return None
    ctx = dataclasses.replace(ctx, before=figures.before, latency_ms=figures.latency_ms, before_digest=figures.digests,
                              data_dependent=_data_dependent_positions(optimized.get("fp32") or {}))
    try:
        return advice_plan(candidates, ctx)
    except Exception:  # noqa: BLE001 - advice is an extra; a failure here must not fail the comparison
        log.warning("advice failed; the report has none", exc_info=True)
        return None
