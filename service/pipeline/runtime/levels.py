"""The levels stage: what ONNX Runtime makes of each file at each GraphOptimizationLevel.

``analyze_levels`` runs three phases over a ``LevelsInput`` (what is compared, from the earlier stages'
results) and a ``LevelsRun`` (how this job runs it), each a section of the report as it comes
(``on_section``):

1. **Level graphs** (``_graphs_phase``, every depth). For every artifact (``fp32`` first) and every
   requested level, one CPU EP session is created with ``optimized_model_filepath``; ORT writes the graph
   it will run while the session is created. The saved graph is summarized (op histogram, int8 kernels,
   biases, layout, blockers) and diffed against the previous level (``disable_all`` against the file as
   written: ORT's "necessary" steps such as EnsureUniqueDQForNodeUnit already run there). No sample runs.
2. **Accuracy** (``_accuracy_phase``, depth standard and full), artifact by artifact: each distinct level
   graph's session runs the evaluation samples untimed on the job's cores (``parallel_runs.runs_on_cores``),
   and its outputs are compared with fp32 at its first level (the reference of every SQNR in the report).
   Then the cross-artifact agreement.
3. **Latency** (``_latency_phase``) at the levels ``options.timed_levels`` names, each distinct graph timed
   alone on a session of its own (``latency.latency_alone``), after every accuracy run.

A level whose graph ORT wrote identically to an earlier level of the same artifact (equal digests) is
neither run nor timed again: its outputs and latency are that level's (``same_graph_as``). The
decisions table and the lints read these results in the decide stage (``verdict.decide``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from service.pipeline.inspect.blockers import reasons_by_op, rows_index, unfused_nodes
from service.pipeline.inspect.graph_diff import diff_graphs
from service.pipeline.inspect.graph_summary import (
    FlooredWeight,
    bias_state,
    layout_info,
    node_summaries,
    op_histogram,
    ops_on_float,
    output_steps,
    quantized_activation_dtypes,
    scales_at_floor,
    weight_quant_params,
)
from service.pipeline.context import Progress
from service.pipeline.isolation import scrub
from service.pipeline.ort.targets import int8_allowed_in
from service.pipeline.runtime.profile import profile_of, where_it_loses
from service.pipeline.runtime.latency import (
    LatencyBudget,
    LoadProbe,
    latency_alone,
    latency_protocol_from_options,
)
from service.pipeline.runtime.level_graphs import (
    self_contained_bytes,
    self_contained_from_level_graph,
    session_and_level_graph,
)
from service.pipeline.runtime.output_kinds import outputs_after_random_draws
from service.pipeline.runtime.numerics import (
    RunOutputs, compared_exactly, concat_runs, cosine, level_numerics, max_abs_error, mismatch_share, sqnr_db,
)
from service.pipeline.ort.sessions import session_for
from service.pipeline.runtime.parallel_runs import Cores, runs_on_cores
from service.pipeline.sections import ACCURACY, AGREEMENT, LATENCY, LEVEL_GRAPHS
from service.pipeline.vocabulary import (
    COMPUTE_OPS,
    INT8_KERNELS,
    RANDOM_OPS,
    GraphIndex,
    all_nodes,
    float_tail_nodes,
    graph_from_path,
    int8_coverage,
    op_key,
)
from service.schemas.levels import AgreementRow, LevelNumerics, OpProfile, OptimizedLevel
from service.schemas.options import BUILTIN_ARTIFACTS, LEVEL_VALUES, LEVELS, ComparisonOptions, measures_accuracy, timed_levels

log = logging.getLogger(__name__)

__all__ = ["FileFacts", "LevelsInput", "LevelsResult", "LevelsRun", "analyze_levels", "file_facts_from_graph",
           "level_structure"]


@dataclass(frozen=True)
class FileFacts:
    """What the decisions and lints need from a file as written (the graph itself is not kept)."""

    opset: int
    op_histogram: dict[str, int]
    bias_summary: str
    weights: list[dict]
    activation_dtypes: list[str]
    int8_kernels: dict[str, int]
    transposes: int
    # Conv/MatMul/Gemm/... inside If/Loop/Scan bodies (op_histogram counts the main graph only)
    subgraph_compute_ops: dict[str, int] = field(default_factory=dict)
    # dtype of the first input of each main-graph compute op: {"float64": 3} says why nothing was quantized
    compute_input_dtypes: dict[str, int] = field(default_factory=dict)
    # weights whose scale torchao's XNNPACK eps decided (``scales_at_floor``)
    floored_weights: list[FlooredWeight] = field(default_factory=list)


def file_facts_from_graph(g: GraphIndex) -> FileFacts:
    hist = op_histogram(g)
    kernels = {k: v for k, v in hist.items() if k in INT8_KERNELS}
    acts = quantized_activation_dtypes(g)
    in_bodies = Counter(op_key(n) for n in all_nodes(g.model.graph)) - Counter(hist)
    return FileFacts(opset=g.opset, op_histogram=hist, bias_summary=bias_state(g).summary,
                     floored_weights=scales_at_floor(g),
                     weights=weight_quant_params(g), activation_dtypes=acts, int8_kernels=kernels,
                     transposes=hist.get("Transpose", 0),
                     subgraph_compute_ops={k: v for k, v in sorted(in_bodies.items()) if k in COMPUTE_OPS},
                     compute_input_dtypes=dict(Counter(g.dtypes.get(n.input[0], "unknown") for n in g.nodes
                                                       if op_key(n) in COMPUTE_OPS and n.input)))


@dataclass(frozen=True)
class LevelsResult:
    optimized: dict[str, dict[str, OptimizedLevel]]
    agreement: list[AgreementRow]
    timings: dict[str, float]
    files: dict[str, FileFacts] = field(default_factory=dict)
    levels: list[str] = field(default_factory=list)  # the levels run, in ORT's order
    # fp32 at its first level run (disable_all, the file as written, unless options.levels leaves
    # it out), every eval sample concatenated:
    # the reference of every SQNR in the report, kept for the advice re-runs.
    reference_outputs: list[np.ndarray] | None = None


# The sections of the report the levels stage finishes, in order (``on_section``; pipeline/sections.py):
# the level graphs, then accuracy per artifact ("accuracy:<artifact>"; "agreement" once every artifact's is
# done), latency.
Section = Callable[[str, LevelsResult], None]
# () -> file -> (output names, each output's values over the eval feeds, as ``concat_runs`` gives them)
SharedRuns = Callable[[], dict[str, tuple[list[str], list[np.ndarray]]]]


@dataclass(frozen=True)
class LevelsInput:
    """What the levels compare, built from the earlier stages' results (``runtime/stage.levels_input``): the
    files that go on (``Inspected.paths``: fp32, then every quantized artifact with status ok), the evaluation
    samples, the options, and the output positions whose shape follows the values computed
    (``Fp32.data_dependent_outputs``): compared by shape, never element-wise, nor across artifacts. An emulated
    platform's levels (platforms/emulated_levels.py) read the same."""

    artifact_paths: dict[str, Path]
    eval_feeds: list[dict[str, np.ndarray]]
    options: ComparisonOptions
    data_dependent: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LevelsRun:
    """How this machine's levels run within the job (from its ``StageContext`` and request, runtime/stage.py)."""

    out_dir: Path  # <artifact>.<level>.onnx, when keep_level_graphs
    # False: only the graphs' digests are kept (a download makes them again, see ``runtime/level_graphs.py``).
    keep_level_graphs: bool = True
    # The job's cores, on which the accuracy runs go (``parallel_runs``); the figures are the same whatever it is.
    cores: Cores = 1
    concurrent_jobs: LoadProbe | None = None  # how many jobs the service runs right now (recorded with each latency)
    progress: Progress | None = None
    # Called as each section is done (the report as it comes), with a result that holds nothing a later section
    # changes (no timings, no ``evaluate_seconds``).
    on_section: Section | None = None
    # Every file's outputs on the eval feeds at disable_all, run by someone who runs those very computations
    # anyway (the per-tensor table's first samples, issue 47): called once, before the accuracy runs, when no
    # file draws random numbers; ``{}`` or an exception: each file runs its own.
    disable_all_runs: SharedRuns | None = None


def _ordered(names) -> list[str]:
    known = ["fp32", *BUILTIN_ARTIFACTS]  # then the brought files, by name
    return [n for n in known if n in names] + sorted(n for n in names if n not in known)


@dataclass
class _Graphs:
    """One artifact after phase 1: its levels (no numerics, no latency yet) and what phases 2 and 3 need."""

    name: str
    path: Path
    per_level: dict[str, OptimizedLevel]
    facts: FileFacts
    steps: list[float | None]
    digests: dict[str, str]  # level -> LevelGraphFiles.digest (levels whose session was made)
    random_ops: bool  # draws random numbers: its feeds run one after the other (parallel_runs)
    outputs: dict[str, list[np.ndarray]] = field(default_factory=dict)  # level -> every eval sample, concatenated
    output_names: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # level -> accuracy + latency wall seconds


def _not_measured(options: ComparisonOptions, level: str, timed: list[str]) -> dict[str, str]:
    """What a level will not measure, naming the option that would (issue 39): said in phase 1 already."""
    out = {}
    if not measures_accuracy(options):
        out["numerics"] = "not measured: depth 'structure' runs no evaluation sample (set depth 'standard')"
    if level not in timed:
        if not options.latency.enabled:
            out["latency"] = "not timed: options.latency.enabled is false"
        elif options.depth == "structure":
            out["latency"] = "not timed: depth 'structure' times nothing (set depth 'standard')"
        else:
            out["latency"] = (f"not timed: options.latency_levels is {options.latency_levels}; add {level!r} to "
                              "latency_levels, or set depth 'full', to time it")
    return out


@dataclass(frozen=True)
class _GraphsPlan:
    """What phase 1 does alike to every artifact."""

    levels: list[str]  # the levels run, in ORT's order
    options: ComparisonOptions
    timed: list[str]  # the levels latency times (``timed_levels``)
    out_dir: Path
    graphs_dir: Path  # where ORT writes each level graph; removed once phase 1 is done
    keep_level_graphs: bool
    # Whether ORT's QDQ selectors take int8 activations in these sessions: QDQIsInt8Allowed() on this machine
    # (ort/targets.py), unless the job's options.ort_session sets session.qdqisint8allowed
    int8_allowed: bool
    fp32_compute: int = 0  # the fp32 file's compute ops: set once it is read (it comes first)


@dataclass
class _Levels:
    """The stage as it goes: phase 1 makes it, the accuracy and latency phases fill its levels in."""

    names: list[str]  # the artifacts, fp32 first
    levels: list[str]
    timed: list[str]
    by_name: dict[str, _Graphs]
    drawn: dict[int, str]  # output position -> the unseeded random op it depends on (fp32's file): not measured
    timings: dict[str, float]
    agreement: list[AgreementRow] = field(default_factory=list)
    # fp32 at its first level run, every eval sample concatenated: the reference of every SQNR (phase 2 sets it)
    reference: RunOutputs | None = None

    def result(self, *, final: bool = False) -> LevelsResult:
        """The stage's result so far; ``final`` adds what later sections change (timings, evaluate_seconds)."""
        optimized = {n: self.by_name[n].per_level for n in self.names}
        if final:  # the wall seconds, which the partial results leave out: latency adds to them
            seconds = {n: g.seconds for n, g in self.by_name.items()}
            optimized = {n: {lv: ol.model_copy(update={"evaluate_seconds": round(seconds[n].get(lv, 0.0), 4)})
                             for lv, ol in per.items()} for n, per in optimized.items()}
        return LevelsResult(optimized=optimized, agreement=list(self.agreement),
                            timings={k: round(v, 4) for k, v in self.timings.items()} if final else {},
                            files={n: g.facts for n, g in self.by_name.items()}, levels=self.levels,
                            reference_outputs=self.reference.values if self.reference is not None else None)

    def finished(self, section: str, on_section: Section | None) -> None:
        """Hands ``on_section`` the result as it stands once ``section`` is done."""
        if on_section:
            on_section(section, self.result())


def analyze_levels(inputs: LevelsInput, run: LevelsRun, *, loaded: dict[str, GraphIndex] | None = None) -> LevelsResult:
    """Every artifact at every level of ``options.levels``, in the three phases the module names: the level
    graphs, accuracy (unless depth is "structure"), latency at ``options.timed_levels``.

    A session that fails at one level is recorded in that level's ``error`` and the other levels go on.
    ``loaded``: the graph index of a file as written, when the caller already has it (it is not loaded again;
    taken out as it is used, so a real-size model is not held twice).
    """
    notify = run.progress or (lambda stage, done, total: None)
    state = _graphs_phase(inputs, run, loaded if loaded is not None else {}, notify)
    state.finished(LEVEL_GRAPHS, run.on_section)
    if measures_accuracy(inputs.options):
        _accuracy_phase(state, inputs, run, notify)
    if state.timed and inputs.eval_feeds:
        _latency_phase(state, inputs, run, notify)
    return state.result(final=True)


def _graphs_phase(inputs: LevelsInput, run: LevelsRun, loaded: dict[str, GraphIndex], notify: Progress) -> _Levels:
    """Phase 1: every artifact's level graphs, made, summarized and diffed level to level; no sample runs."""
    out_dir = Path(run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    options = inputs.options
    levels = [lv for lv in LEVELS if lv in options.levels]
    names = _ordered(inputs.artifact_paths)
    plan = _GraphsPlan(levels=levels, options=options, timed=timed_levels(options), out_dir=out_dir,
                       graphs_dir=out_dir / "_level_graphs", keep_level_graphs=run.keep_level_graphs,
                       int8_allowed=int8_allowed_in(options.ort_session))
    t0 = time.perf_counter()
    by_name: dict[str, _Graphs] = {}
    drawn: dict[int, str] = {}
    for i, name in enumerate(names):
        # Lazily: a file's external weights stay on disk until a summary reads one tensor.
        path = Path(inputs.artifact_paths[name])
        file_graph = loaded.pop(name, None) or graph_from_path(path, lazy=True)
        if name == "fp32":
            plan = replace(plan, fp32_compute=int8_coverage(file_graph).float_count)
            drawn = outputs_after_random_draws(file_graph.model)
        by_name[name] = _level_graphs(name, path, file_graph, plan, step=lambda k, n=i: notify(
            "optimize", n * len(levels) + k, len(names) * len(levels)))
    shutil.rmtree(plan.graphs_dir, ignore_errors=True)
    return _Levels(names=names, levels=levels, timed=plan.timed, by_name=by_name, drawn=drawn,
                   timings={"optimize": time.perf_counter() - t0, "evaluate": 0.0, "latency": 0.0})


def _accuracy_phase(state: _Levels, inputs: LevelsInput, run: LevelsRun, notify: Progress) -> None:
    """Phase 2, artifact by artifact: each distinct level graph's outputs on the eval samples (untimed, on the
    job's cores) and their numerics against fp32 at its first level; then the cross-artifact agreement."""
    todo = sum(1 for g in state.by_name.values() for ol in g.per_level.values() if not ol.error)
    done = 0
    # The per-tensor table's sessions run without options.ort_session: they are at disable_all, where no entry
    # ORT_SESSION_ENTRIES allows changes anything (ORT reads session.qdqisint8allowed at Level2 only,
    # graph_transformer_utils.cc), so their outputs are the ones a session with the entries gives.
    shared = _shared_disable_all(state.by_name, state.levels, run.disable_all_runs, state.timings)
    for name in state.names:
        t1 = time.perf_counter()
        g = state.by_name[name]
        for level in state.levels:
            ol = g.per_level[level]
            if ol.error:
                continue
            t2 = time.perf_counter()
            numerics, error = _numerics_at(state, g, level, shared.get(name) if level == "disable_all" else None,
                                           inputs, run.cores)
            g.seconds[level] = g.seconds.get(level, 0.0) + (0.0 if ol.same_graph_as else time.perf_counter() - t2)
            g.per_level[level] = ol.model_copy(update={"numerics": numerics, "error": error})
            done += 1
            notify("evaluate", done, todo)
        state.timings["evaluate"] += time.perf_counter() - t1
        state.finished(f"{ACCURACY}:{name}", run.on_section)
    t1 = time.perf_counter()
    state.agreement = agreement_rows({n: g.outputs for n, g in state.by_name.items()},
                                     {n: g.output_names for n, g in state.by_name.items() if g.output_names},
                                     {n: g.steps for n, g in state.by_name.items()}, state.levels,
                                     skip=set(inputs.data_dependent) | set(state.drawn))
    state.timings["evaluate"] += time.perf_counter() - t1
    state.finished(AGREEMENT, run.on_section)


def _numerics_at(state: _Levels, g: _Graphs, level: str, shared: tuple[list[str], list[np.ndarray]] | None,
                 inputs: LevelsInput, cores: Cores) -> tuple[LevelNumerics | None, str | None]:
    """``g``'s outputs at ``level`` (those of the earlier level with the same graph, the shared runs' at
    disable_all, or run here), kept on ``g``, and their numerics against the reference; or what stopped them."""
    ol = g.per_level[level]
    try:
        if ol.same_graph_as:  # the same graph gives the same outputs: not run again
            if ol.same_graph_as not in g.outputs:
                raise _SameGraphFailed(g.per_level[ol.same_graph_as].error)
            outputs = g.outputs[ol.same_graph_as]
        elif shared is not None:
            g.output_names, outputs = shared
        else:
            outputs = _accuracy_outputs(g, level, inputs, cores)
        g.outputs[level] = outputs
        if state.reference is None and g.name == "fp32":
            state.reference = RunOutputs(names=list(g.output_names), values=outputs)
        if state.reference is None:
            return None, None
        previous = next((g.outputs[lv] for lv in reversed(state.levels[:state.levels.index(level)])
                         if lv in g.outputs), None)
        return level_numerics(state.reference, RunOutputs(names=g.output_names, values=outputs), steps=g.steps,
                              previous=previous, samples=len(inputs.eval_feeds), data_dependent=inputs.data_dependent,
                              drawn=state.drawn), None
    except _SameGraphFailed as e:
        return None, e.error
    except Exception as e:  # noqa: BLE001 - a kernel failing at run time is a finding
        return None, scrub(f"run failed: {type(e).__name__}: {e}")[:2000]


def _shared_disable_all(by_name: dict, levels: list[str], runs: SharedRuns | None,
                        timings: dict[str, float]) -> dict[str, tuple[list[str], list[np.ndarray]]]:
    """The outputs at disable_all that ``runs`` computes (their time counts as the table's), or {}: none asked,
    disable_all not among the levels, a file that draws random numbers (its draws follow the session's run
    order, which another session need not share), or the runs failing (each file then runs its own)."""
    if runs is None or "disable_all" not in levels or any(g.random_ops for g in by_name.values()):
        return {}
    t0 = time.perf_counter()
    try:
        shared = runs()
    except Exception:  # noqa: BLE001 - the accuracy runs are made the usual way instead
        log.warning("the shared runs at disable_all failed; each file runs its own", exc_info=True)
        shared = {}
    # The table's time (``timings.layers``), not accuracy's: without the table, the accuracy runs at
    # disable_all would have cost only their own part of it; a file's evaluate_seconds there is ~0.
    timings["layers"] = timings.get("layers", 0.0) + time.perf_counter() - t0
    return shared


class _SameGraphFailed(Exception):
    def __init__(self, error: str | None):
        super().__init__(error)
        self.error = error


def _accuracy_outputs(g: _Graphs, level: str, inputs: LevelsInput, cores: Cores) -> list[np.ndarray]:
    """Every eval feed through ``g`` at ``level``, untimed, on ``cores`` threads (one intra-op thread each),
    with the job's ORT session config entries (``options.ort_session``), as every session of this stage."""
    feeds = inputs.eval_feeds
    session = session_for(g.path, level, intra_op_threads=1, session_config=inputs.options.ort_session)
    g.output_names = [o.name for o in session.get_outputs()]
    try:
        return concat_runs(runs_on_cores(lambda feed: session.run(None, feed), feeds, cores, sequential=g.random_ops))
    finally:
        del session


def _latency_phase(state: _Levels, inputs: LevelsInput, run: LevelsRun, notify: Progress) -> None:
    """Phase 3, after every accuracy run: each distinct graph at a timed level, alone on a session of its own
    (latency.py), on the first eval sample."""
    start = time.perf_counter()
    feed = inputs.eval_feeds[0]
    protocol = latency_protocol_from_options(inputs.options.latency)
    jobs = []  # (graph, level, the timed level with the same graph or None)
    for name in state.names:
        g = state.by_name[name]
        first_at: dict[str, str] = {}
        for level in state.timed:
            ol = g.per_level.get(level)
            if ol is None or ol.error:
                continue
            digest = g.digests.get(level)
            jobs.append((g, level, first_at.get(digest)))
            first_at.setdefault(digest, level)
    budget = LatencyBudget(protocol.budget_seconds, sum(1 for *_, same in jobs if same is None))
    for k, (g, level, same) in enumerate(jobs):
        ol = g.per_level[level]
        if same is not None:  # an identical graph at a level timed before: its measurement stands
            earlier = g.per_level[same].latency
            latency = earlier.model_copy(update={"timed_with": same}) if earlier is not None else None
            g.per_level[level] = ol.model_copy(update={"latency": latency, "profile": g.per_level[same].profile})
            continue
        t0 = time.perf_counter()
        try:
            config = inputs.options.ort_session
            session = session_for(g.path, level, intra_op_threads=protocol.intra_op_threads, session_config=config)
            latency = latency_alone(session, feed, protocol, budget, concurrent_jobs=run.concurrent_jobs)
            del session
            g.per_level[level] = ol.model_copy(update={
                "latency": latency, "profile": _profiled(g.path, level, feed, protocol, latency, config)})
        except Exception as e:  # noqa: BLE001 - a run failing here is a finding, as in the accuracy runs
            g.per_level[level] = ol.model_copy(update={"error": ol.error or scrub(
                f"latency run failed: {type(e).__name__}: {e}")[:2000]})
        budget.graph_done()
        g.seconds[level] = g.seconds.get(level, 0.0) + time.perf_counter() - t0
        notify("latency", k + 1, len(jobs))
    _say_where_it_loses(state.by_name, state.timed)
    state.timings["latency"] = time.perf_counter() - start
    state.finished(LATENCY, run.on_section)


def _profiled(path: Path, level: str, feed: dict[str, np.ndarray], protocol, latency,
              session_config: dict[str, str]) -> OpProfile | None:
    """One run under ORT's profiler after the timed ones, on a session of its own with the timed session's
    config entries (runtime/profile.py); None when the profiler fails (logged: the latency stands without it)."""
    try:
        return profile_of(path, level, feed, threads=protocol.intra_op_threads, median_ms=latency.median_ms,
                          session_config=session_config)
    except Exception:  # noqa: BLE001 - a profile is an explanation, never a reason to lose the figure
        log.warning("profiling %s at %s failed", path.name, level, exc_info=True)
        return None


def _say_where_it_loses(by_name: dict[str, _Graphs], timed: list[str]) -> None:
    """Each artifact's profile at each timed level says, in one sentence, where it loses to fp32 (when it does)."""
    fp32 = by_name.get("fp32")
    if fp32 is None:
        return
    for name, g in by_name.items():
        for level in timed:
            ol, ref = g.per_level.get(level), fp32.per_level.get(level)
            if name == "fp32" or ol is None or ref is None or ol.profile is None or not ol.latency or not ref.latency:
                continue
            said = where_it_loses(name, level, ol.profile, ol.latency.median_ms, ref.latency.median_ms)
            g.per_level[level] = ol.model_copy(update={"profile": ol.profile.model_copy(
                update={"where_it_loses": said})})


def _level_graphs(name: str, path: Path, file_graph: GraphIndex, plan: _GraphsPlan,
                  step: Callable[[int], None]) -> _Graphs:
    """Phase 1 for one artifact: at every level, session, saved graph, summary, diff vs the previous level."""
    options, out_dir, graphs_dir = plan.options, plan.out_dir, plan.graphs_dir
    threads = options.latency.intra_op_threads
    facts = file_facts_from_graph(file_graph)
    steps = output_steps(file_graph)
    float_tail = float_tail_nodes(file_graph) if name == "pt2e_qdq" else {}
    random_ops = any(op_key(n) in RANDOM_OPS for n in all_nodes(file_graph.model.graph))
    prev_graph, prev_level = file_graph, "file"
    seen: dict[str, str] = {}  # level graph digest -> the first level of this artifact that had it
    digests: dict[str, str] = {}
    per_level: dict[str, OptimizedLevel] = {}
    extended_rows = None  # blockers at extended: the layout levels keep them (no QDQ fusion runs there)
    for k, level in enumerate(plan.levels):
        t0 = time.perf_counter()
        out_file = out_dir / f"{name}.{level}.onnx"
        not_measured = _not_measured(options, level, plan.timed)
        try:
            session, lg = session_and_level_graph(path, level, graphs_dir / f"{name}.{level}", intra_op_threads=threads,
                                                  session_config=options.ort_session)
            del session  # the accuracy and latency phases make their own (a session holds the weights)
            graph = graph_from_path(lg.graph, lazy=True)  # weights stay on disk until a summary reads one
        except Exception as e:  # noqa: BLE001 - ORT refusing a level is a result, not a crash
            per_level[level] = OptimizedLevel(level=level, level_value=LEVEL_VALUES[level], not_measured=not_measured,
                                              error=scrub(f"session creation failed: {type(e).__name__}: {e}")[:2000])
            step(k + 1)
            continue
        session_seconds = time.perf_counter() - t0
        diff = diff_graphs(prev_graph, graph, previous=prev_level)
        if options.attribution and diff.rewrites and level != "disable_all":
            diff = _attribute(diff, path, level, prev_graph, threads, options.ort_session)
        structure = level_structure(graph, name=name, level=level, facts=facts, fp32_compute=plan.fp32_compute,
                                    int8_allowed=plan.int8_allowed, extended_rows=extended_rows, float_tail=float_tail)
        if level == "extended":
            extended_rows = structure.pop("extended_rows")
        structure.pop("extended_rows", None)
        # ORT often writes the very same graph at another level (``all`` == ``layout`` here for
        # every example): the same graph gives the same outputs and the same speed, so it is
        # neither run nor timed again (the level says which level it equals).
        same_as = seen.get(lg.digest)
        seen.setdefault(lg.digest, level)
        digests[level] = lg.digest
        if plan.keep_level_graphs:
            self_contained_from_level_graph(lg, out_file)
        shutil.rmtree(lg.folder, ignore_errors=True)  # the weights: a download makes them again
        per_level[level] = OptimizedLevel(
            level=level, level_value=LEVEL_VALUES[level], file=out_file.name, **structure,
            diff=diff, not_measured=not_measured,
            session_seconds=session_seconds, same_graph_as=same_as,
            graph_sha256=lg.graph_sha256, weights_sha256=lg.data_sha256, graph_bytes=lg.graph_bytes,
            weights_bytes=lg.data_bytes, download_bytes=self_contained_bytes(graph.model, lg.folder),
            file_stored=plan.keep_level_graphs,
        )
        prev_graph, prev_level = graph, level
        step(k + 1)
    return _Graphs(name=name, path=path, per_level=per_level, facts=facts, steps=steps, digests=digests,
                   random_ops=random_ops)


def level_structure(graph: GraphIndex, *, name: str, level: str, facts: FileFacts, fp32_compute: int,
                    int8_allowed: bool, extended_rows=None, float_tail=None) -> dict:
    """What one level graph holds, as ``OptimizedLevel`` fields: histogram, int8 kernels and coverage,
    the nodes left float and why (the blockers under the platform's ``int8_allowed``), bias, layout.
    The same for the graphs this machine's ORT saved and those an emulated platform's ORT saved;
    ``extended_rows`` (popped by the caller) is what the layout levels read of ``extended``'s blockers."""
    hist = op_histogram(graph)
    kernels = {k: v for k, v in hist.items() if k in INT8_KERNELS}
    nodes = node_summaries(graph)
    act = Counter(n.activation_dtype or "unknown" for n in nodes if op_key(n) in INT8_KERNELS)
    # Over this graph's own compute (vocabulary.int8_coverage): PT2E unrolls an LSTM into a dozen
    # Gemms, ORT folds a U @ V weight and inlines local functions; the fp32 file counts none of that.
    counted = int8_coverage(graph)
    int8_compute, float_compute, coverage = counted.int8_count, counted.float_ops, counted.coverage
    unfused = unfused_nodes(graph, level=level, int8_allowed=int8_allowed, previous=extended_rows,
                            pt2e=name == "pt2e_qdq", float_tail=float_tail or {})
    ops_float = ops_on_float(graph) if name == "fp32" else dict(Counter(r.op_type for r in unfused))
    return dict(
        op_histogram=hist, node_count=len(graph.nodes), nodes=nodes,
        quantize_linear=hist.get("QuantizeLinear", 0), dequantize_linear=hist.get("DequantizeLinear", 0),
        int8_kernels=kernels, compute_ops_fp32=fp32_compute, compute_ops_int8=int8_compute,
        compute_ops_float=float_compute, int8_coverage=coverage, kernel_activation_dtypes=dict(act),
        ops_float=ops_float, ops_float_reasons=reasons_by_op(unfused),
        unfused=[] if name == "fp32" else unfused, bias=bias_state(graph),
        layout=layout_info(graph, facts.transposes),
        extended_rows=rows_index(unfused, graph) if level == "extended" else None,
    )


def agreement_rows(results: dict[str, dict[str, list[np.ndarray]]], output_names: dict[str, list[str]],
                   steps_of: dict[str, list[float | None]], levels: list[str],
                   skip: set[int] = frozenset()) -> list[AgreementRow]:
    """Every quantized artifact against every other (the built-in paths, then the brought files) at the
    highest level run (``all``); the output positions in ``skip`` (data-dependent shapes) are not compared."""
    quant = _ordered([a for a in results if a != "fp32"])
    rows = []
    for i, a in enumerate(quant):
        for b in quant[i + 1:]:
            level = next((lv for lv in reversed(levels) if lv in results[a] and lv in results[b]), None)
            if level is None:
                continue
            for k, (ya, yb) in enumerate(zip(results[a][level], results[b][level])):
                if k in skip or ya.shape != yb.shape:
                    continue
                equal = 1.0 - mismatch_share(ya, yb)
                if compared_exactly(ya):
                    rows.append(AgreementRow(
                        a=a, b=b, level=level, output=output_names[a][k], compared="exact", sqnr_db=None,
                        cosine=None, max_abs_error=max_abs_error(ya, yb) if ya.dtype.kind in "iub" else None,
                        equal_share=equal))
                    continue
                diff = max_abs_error(ya, yb)
                step = steps_of[a][k] if k < len(steps_of[a]) else None
                rows.append(AgreementRow(
                    a=a, b=b, level=level, output=output_names[a][k], sqnr_db=sqnr_db(ya, yb),
                    cosine=cosine(ya, yb), max_abs_error=diff,
                    max_diff_steps=diff / step if step else None, equal_share=equal,
                ))
    return rows


def _attribute(diff, path: Path, level: str, prev_graph: GraphIndex, threads: int, session_config: dict[str, str]):
    """Switch each candidate transformer off at ``level`` (in a session with the job's ``session_config``, as the
    level graph's); a rewrite is confirmed when it disappears."""
    cache: dict[str, set[str]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="qc-attr-"))
    try:
        rewrites = []
        for rw in diff.rewrites:
            candidates = [t.strip() for t in (rw.transformer or "").split(",") if t.strip()]
            if not candidates:
                rewrites.append(rw)
                continue
            confirmed = []
            for cand in candidates:
                if cand not in cache:
                    out = tmp / f"{cand}.onnx"
                    try:
                        session_for(path, level, intra_op_threads=threads, optimized_model_path=out,
                                    disabled_optimizers=[cand], session_config=session_config)
                        d = diff_graphs(prev_graph, graph_from_path(out), previous=diff.previous)
                        cache[cand] = {r.summary for r in d.rewrites}
                    except Exception:  # noqa: BLE001 - an unknown name or a failing session proves nothing
                        cache[cand] = {rw.summary}
                if rw.summary not in cache[cand]:
                    confirmed.append(cand)
            update = {"confirmed": bool(confirmed), "confirmed_by": confirmed}
            if not confirmed:
                update["transformer"] = None  # switching each candidate off left the rewrite in place: none made it
            rewrites.append(rw.model_copy(update=update))
        return diff.model_copy(update={"rewrites": rewrites})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
