"""The levels stage: what ONNX Runtime makes of each file at each GraphOptimizationLevel.

Three phases, each a section of the report as it comes (``on_section``):

1. **Level graphs** (every depth). For every artifact (``fp32`` first) and every requested level, one
   CPU EP session is created with ``optimized_model_filepath``; ORT writes the graph it will run while
   the session is created. The saved graph is summarized (op histogram, int8 kernels, biases, layout,
   blockers) and diffed against the previous level (``disable_all`` against the file as written: ORT's
   "necessary" steps such as EnsureUniqueDQForNodeUnit already run there). No sample runs.
2. **Accuracy** (depth standard and full), artifact by artifact: each distinct level graph's session
   runs the evaluation samples untimed on the job's cores (``parallel_runs.runs_on_cores``), and its
   outputs are compared with fp32 at its first level (the reference of every SQNR in the report).
   Then the cross-artifact agreement.
3. **Latency** at the levels ``options.timed_levels`` names, each distinct graph timed alone on a
   session of its own (``latency.latency_alone``), after every accuracy run.

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
from dataclasses import dataclass, field
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
from service.pipeline.isolation import scrub
from service.pipeline.ort.targets import host_platform
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
    compared_exactly, concat_runs, cosine, level_numerics, max_abs_error, mismatch_share, sqnr_db,
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
from service.schemas.levels import AgreementRow, OptimizedLevel
from service.schemas.options import ARTIFACTS, LEVEL_VALUES, LEVELS, ComparisonOptions, measures_accuracy, timed_levels

log = logging.getLogger(__name__)

__all__ = ["FileFacts", "LevelsResult", "analyze_levels", "file_facts_from_graph", "level_structure"]


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


def _ordered(names) -> list[str]:
    known = ["fp32", *ARTIFACTS]
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


def analyze_levels(*, artifact_paths: dict[str, Path], eval_feeds: list[dict[str, np.ndarray]],
                   out_dir: Path, options: ComparisonOptions,
                   progress: Callable[[str, int, int], None] | None = None,
                   loaded: dict[str, GraphIndex] | None = None, concurrent_jobs: LoadProbe | None = None,
                   keep_level_graphs: bool = True, cores: Cores = 1,
                   data_dependent: dict[int, str] | None = None, on_section: Section | None = None,
                   disable_all_runs: SharedRuns | None = None) -> LevelsResult:
    """Every artifact at every level of ``options.levels``: graph, diff; numerics (unless depth is
    "structure"); latency at ``options.timed_levels``.

    Writes ``out_dir/<artifact>.<level>.onnx`` when ``keep_level_graphs``; otherwise only the
    graphs' digests are kept (a download makes them again, see ``runtime/level_graphs.py``).
    A session that fails at one level is recorded in that level's ``error`` and the other levels go on.
    ``loaded``: the graph index of a file as written, when the caller already has it (it is not loaded
    again; taken out as it is used). ``concurrent_jobs``: how many jobs the service runs right now
    (recorded with each latency). ``cores``: the job's cores, on which the accuracy runs go
    (``parallel_runs``); the figures are the same whatever it is.
    ``data_dependent``: output positions whose shape follows the values computed (fp32's
    ``Fp32.data_dependent_outputs``): compared by shape, never element-wise, nor across artifacts.
    ``on_section(name, result so far)``: called as each section is done (the report as it comes);
    the result it gets holds nothing a later section changes (no timings, no ``evaluate_seconds``).
    ``disable_all_runs()``: every file's outputs on ``eval_feeds`` at disable_all, run by someone who runs
    those very computations anyway (the per-tensor table's first samples, issue 47): called once, before the
    accuracy runs, when no file draws random numbers; ``{}`` or an exception: each file runs its own.
    """
    loaded = loaded if loaded is not None else {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = [lv for lv in LEVELS if lv in options.levels]
    names = _ordered(artifact_paths)
    timed = timed_levels(options)
    graphs_dir = out_dir / "_level_graphs"
    timings = {"optimize": 0.0, "evaluate": 0.0, "latency": 0.0}
    notify = progress or (lambda stage, done, total: None)
    # ORT's QDQIsInt8Allowed() on this machine (ort/targets.py)
    int8_allowed = host_platform().int8_allowed

    t0 = time.perf_counter()
    by_name: dict[str, _Graphs] = {}
    fp32_compute = 0
    drawn: dict[int, str] = {}  # output position -> the unseeded random op it depends on (fp32's file): not measured
    for i, name in enumerate(names):
        # Lazily: a file's external weights stay on disk until a summary reads one tensor.
        path = Path(artifact_paths[name])
        file_graph = loaded.pop(name, None) or graph_from_path(path, lazy=True)
        if name == "fp32":
            fp32_compute = int8_coverage(file_graph).float_count
            drawn = outputs_after_random_draws(file_graph.model)
        by_name[name] = _level_graphs(name, path, file_graph, levels, options, out_dir=out_dir, graphs_dir=graphs_dir,
                                      fp32_compute=fp32_compute, int8_allowed=int8_allowed, timed=timed,
                                      keep_level_graphs=keep_level_graphs,
                                      step=lambda k, n=i: notify("optimize", n * len(levels) + k, len(names) * len(levels)))
    shutil.rmtree(graphs_dir, ignore_errors=True)
    timings["optimize"] = time.perf_counter() - t0
    files = {n: g.facts for n, g in by_name.items()}

    def result(agreement=(), final=False, reference=None) -> LevelsResult:
        optimized = {n: by_name[n].per_level for n in names}
        if final:  # the wall seconds, which the partial results leave out: latency adds to them
            optimized = {n: {lv: ol.model_copy(update={"evaluate_seconds": round(by_name[n].seconds.get(lv, 0.0), 4)})
                             for lv, ol in per.items()} for n, per in optimized.items()}
        return LevelsResult(optimized=optimized, agreement=list(agreement),
                            timings={k: round(v, 4) for k, v in timings.items()} if final else {},
                            files=files, levels=levels, reference_outputs=reference)

    if on_section:
        on_section(LEVEL_GRAPHS, result())

    reference: list[np.ndarray] | None = None
    reference_names: list[str] = []
    agreement: list[AgreementRow] = []
    if measures_accuracy(options):
        todo = sum(1 for g in by_name.values() for ol in g.per_level.values() if not ol.error)
        done = 0
        shared = _shared_disable_all(by_name, levels, disable_all_runs, timings)
        for name in names:
            t1 = time.perf_counter()
            g = by_name[name]
            for level in levels:
                ol = g.per_level[level]
                if ol.error:
                    continue
                numerics, error = None, None
                t2 = time.perf_counter()
                try:
                    if ol.same_graph_as:  # the same graph gives the same outputs: not run again
                        source = g.per_level[ol.same_graph_as]
                        if ol.same_graph_as not in g.outputs:
                            raise _SameGraphFailed(source.error)
                        outputs = g.outputs[ol.same_graph_as]
                    elif level == "disable_all" and name in shared:
                        g.output_names, outputs = shared[name]
                    else:
                        outputs = _accuracy_outputs(g, level, eval_feeds, cores)
                    g.outputs[level] = outputs
                    if reference is None and name == "fp32":
                        reference, reference_names = outputs, list(g.output_names)
                    if reference is not None:
                        previous = next((g.outputs[lv] for lv in reversed(levels[:levels.index(level)])
                                         if lv in g.outputs), None)
                        numerics = level_numerics(reference, reference_names, outputs, g.output_names, steps=g.steps,
                                                  previous=previous, samples=len(eval_feeds),
                                                  data_dependent=dict(data_dependent or {}), drawn=drawn)
                except _SameGraphFailed as e:
                    error = e.error
                except Exception as e:  # noqa: BLE001 - a kernel failing at run time is a finding
                    error = scrub(f"run failed: {type(e).__name__}: {e}")[:2000]
                g.seconds[level] = g.seconds.get(level, 0.0) + (0.0 if ol.same_graph_as else time.perf_counter() - t2)
                g.per_level[level] = ol.model_copy(update={"numerics": numerics, "error": error})
                done += 1
                notify("evaluate", done, todo)
            timings["evaluate"] += time.perf_counter() - t1
            if on_section:
                on_section(f"{ACCURACY}:{name}", result(reference=reference))
        t1 = time.perf_counter()
        agreement = agreement_rows({n: g.outputs for n, g in by_name.items()},
                                   {n: g.output_names for n, g in by_name.items() if g.output_names},
                                   {n: g.steps for n, g in by_name.items()}, levels,
                                   skip=set(data_dependent or {}) | set(drawn))
        timings["evaluate"] += time.perf_counter() - t1
        if on_section:
            on_section(AGREEMENT, result(agreement, reference=reference))

    if timed and eval_feeds:
        t1 = time.perf_counter()
        _time_levels(by_name, names, timed, eval_feeds[0], options, concurrent_jobs, notify)
        timings["latency"] = time.perf_counter() - t1
        if on_section:
            on_section(LATENCY, result(agreement, reference=reference))
    return result(agreement, final=True, reference=reference)


# () -> file -> (output names, each output's values over the eval feeds, as ``concat_runs`` gives them)
SharedRuns = Callable[[], dict[str, tuple[list[str], list[np.ndarray]]]]


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


def _accuracy_outputs(g: _Graphs, level: str, feeds: list[dict[str, np.ndarray]], cores: Cores) -> list[np.ndarray]:
    """Every eval feed through ``g`` at ``level``, untimed, on ``cores`` threads (one intra-op thread each)."""
    session = session_for(g.path, level, intra_op_threads=1)
    g.output_names = [o.name for o in session.get_outputs()]
    try:
        return concat_runs(runs_on_cores(lambda feed: session.run(None, feed), feeds, cores, sequential=g.random_ops))
    finally:
        del session


def _time_levels(by_name: dict[str, _Graphs], names: list[str], timed: list[str], feed: dict[str, np.ndarray],
                 options: ComparisonOptions, concurrent_jobs: LoadProbe | None,
                 notify: Callable[[str, int, int], None]) -> None:
    """Phase 3: each distinct graph at a timed level, alone on a session of its own (latency.py)."""
    protocol = latency_protocol_from_options(options.latency)
    jobs = []  # (graph, level, the timed level with the same graph or None)
    for name in names:
        g = by_name[name]
        first_at: dict[str, str] = {}
        for level in timed:
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
            g.per_level[level] = ol.model_copy(update={"latency": latency})
            continue
        t0 = time.perf_counter()
        try:
            session = session_for(g.path, level, intra_op_threads=protocol.intra_op_threads)
            latency = latency_alone(session, feed, protocol, budget, concurrent_jobs=concurrent_jobs)
            del session
            g.per_level[level] = ol.model_copy(update={"latency": latency})
        except Exception as e:  # noqa: BLE001 - a run failing here is a finding, as in the accuracy runs
            g.per_level[level] = ol.model_copy(update={"error": ol.error or scrub(
                f"latency run failed: {type(e).__name__}: {e}")[:2000]})
        budget.graph_done()
        g.seconds[level] = g.seconds.get(level, 0.0) + time.perf_counter() - t0
        notify("latency", k + 1, len(jobs))


def _level_graphs(name: str, path: Path, file_graph: GraphIndex, levels: list[str], options: ComparisonOptions, *,
                  out_dir: Path, graphs_dir: Path, fp32_compute: int, int8_allowed: bool, timed: list[str],
                  keep_level_graphs: bool, step: Callable[[int], None]) -> _Graphs:
    """Phase 1 for one artifact: at every level, session, saved graph, summary, diff vs the previous level."""
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
    for k, level in enumerate(levels):
        t0 = time.perf_counter()
        out_file = out_dir / f"{name}.{level}.onnx"
        not_measured = _not_measured(options, level, timed)
        try:
            session, lg = session_and_level_graph(path, level, graphs_dir / f"{name}.{level}", intra_op_threads=threads)
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
            diff = _attribute(diff, path, level, prev_graph, threads)
        structure = level_structure(graph, name=name, level=level, facts=facts, fp32_compute=fp32_compute,
                                    int8_allowed=int8_allowed, extended_rows=extended_rows, float_tail=float_tail)
        if level == "extended":
            extended_rows = structure.pop("extended_rows")
        structure.pop("extended_rows", None)
        # ORT often writes the very same graph at another level (``all`` == ``layout`` here for
        # every example): the same graph gives the same outputs and the same speed, so it is
        # neither run nor timed again (the level says which level it equals).
        same_as = seen.get(lg.digest)
        seen.setdefault(lg.digest, level)
        digests[level] = lg.digest
        if keep_level_graphs:
            self_contained_from_level_graph(lg, out_file)
        shutil.rmtree(lg.folder, ignore_errors=True)  # the weights: a download makes them again
        per_level[level] = OptimizedLevel(
            level=level, level_value=LEVEL_VALUES[level], file=out_file.name, **structure,
            diff=diff, not_measured=not_measured,
            session_seconds=session_seconds, same_graph_as=same_as,
            graph_sha256=lg.graph_sha256, weights_sha256=lg.data_sha256, graph_bytes=lg.graph_bytes,
            weights_bytes=lg.data_bytes, download_bytes=self_contained_bytes(graph.model, lg.folder),
            file_stored=keep_level_graphs,
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
    """pt2e_qdq, ort_qdq, ort_qoperator against each other at the highest level run (``all``);
    the output positions in ``skip`` (data-dependent shapes) are not compared."""
    quant = [a for a in ARTIFACTS if a in results]
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


def _attribute(diff, path: Path, level: str, prev_graph: GraphIndex, threads: int):
    """Switch each candidate transformer off at ``level``; a rewrite is confirmed when it disappears."""
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
                                    disabled_optimizers=[cand])
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
