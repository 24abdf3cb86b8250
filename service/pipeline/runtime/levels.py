"""The levels stage: what ONNX Runtime makes of each file at each GraphOptimizationLevel.

For every artifact (``fp32`` first: it is the numerical reference) and every requested level,
one CPU EP session is created with ``optimized_model_filepath``; ORT writes the graph it will
run while the session is created, and the same session then runs the evaluation samples and
the latency loop. The saved graph is summarized (op histogram, int8 kernels, biases, layout) and
diffed against the previous level (``disable_all`` against the file as written: ORT's
"necessary" steps such as EnsureUniqueDQForNodeUnit already run there).

Then the cross-artifact agreement is computed from the outputs. The decisions table and the
lints read these results in the decide stage (``verdict.decide``).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from service.pipeline.environment import cores_idle
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
from service.schemas.options import ARTIFACTS, LEVEL_VALUES, LEVELS, ComparisonOptions
from service.pipeline.isolation import scrub
from service.pipeline.ort.targets import host_platform
from service.pipeline.runtime.latency import (
    LatencyBudget,
    LatencyProtocol,
    LoadProbe,
    latency_protocol_from_options,
    outputs_and_latency,
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
from service.pipeline.vocabulary import (
    COMPUTE_OPS,
    INT8_KERNELS,
    GraphIndex,
    all_nodes,
    float_tail_nodes,
    graph_from_path,
    int8_coverage,
    op_key,
)
from service.schemas.levels import AgreementRow, OptimizedLevel

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


def _ordered(names) -> list[str]:
    known = ["fp32", *ARTIFACTS]
    return [n for n in known if n in names] + sorted(n for n in names if n not in known)


@dataclass
class _Shared:
    """What every artifact's levels read, and what they add up, when artifacts run on two threads."""

    levels: list[str]
    options: ComparisonOptions
    eval_feeds: list[dict[str, np.ndarray]]
    out_dir: Path
    graphs_dir: Path
    protocol: LatencyProtocol
    budget: LatencyBudget
    int8_allowed: bool
    keep_level_graphs: bool
    concurrent_jobs: LoadProbe | None
    progress: Callable[[str, int, int], None] | None
    total: int
    fp32_compute: int = 0  # compute ops of the fp32 file as written (OptimizedLevel.compute_ops_fp32); fp32 runs first
    reference: list[np.ndarray] | None = None  # fp32 at its first level: every SQNR is against it
    reference_names: list[str] = field(default_factory=list)
    data_dependent: dict[int, str] = field(default_factory=dict)  # output position -> why: compared by shape
    # output position -> the unseeded random op it depends on (fp32's file, read first): not measured
    drawn: dict[int, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=lambda: {"optimize": 0.0, "evaluate": 0.0})
    done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self, stage: str, timing: str, seconds: float, *, count: bool) -> None:
        with self.lock:
            self.timings[timing] += seconds
            if count:
                self.done += 1
            if self.progress:
                self.progress(stage, self.done, self.total)

    def graph_done(self) -> None:
        with self.lock:
            self.budget.graph_done()


@dataclass
class _ArtifactLevels:
    per_level: dict[str, OptimizedLevel]
    facts: FileFacts
    outputs: dict[str, list[np.ndarray]]  # level -> outputs, every eval sample concatenated
    output_names: list[str]
    steps: list[float | None]


def analyze_levels(*, artifact_paths: dict[str, Path], eval_feeds: list[dict[str, np.ndarray]],
                   out_dir: Path, options: ComparisonOptions,
                   progress: Callable[[str, int, int], None] | None = None,
                   loaded: dict[str, GraphIndex] | None = None, concurrent_jobs: LoadProbe | None = None,
                   keep_level_graphs: bool = True, parallel: bool | None = None,
                   data_dependent: dict[int, str] | None = None) -> LevelsResult:
    """Every artifact at every level of ``options.levels``: graph, diff, numerics, latency.

    Writes ``out_dir/<artifact>.<level>.onnx`` when ``keep_level_graphs``; otherwise only the
    graphs' digests are kept (a download makes them again, see ``runtime/level_graphs.py``).
    A session that fails at one level is recorded in that level's ``error`` and the other levels go on.
    ``loaded``: the graph index of a file as written, when the caller already has it (it is not loaded
    again; taken out as it is used). ``concurrent_jobs``: how many jobs the service runs right now
    (recorded with each latency). ``parallel``: the quantized artifacts on two threads, after fp32
    (their reference); only without latency, which is always timed alone. None: when two cores are idle.
    Then ``timings`` split the stage's wall time between optimize and evaluate as the threads spent it.
    ``data_dependent``: output positions whose shape follows the values computed (fp32's
    ``Fp32.data_dependent_outputs``): compared by shape, never element-wise, nor across artifacts.
    """
    loaded = loaded if loaded is not None else {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = [lv for lv in LEVELS if lv in options.levels]
    names = _ordered(artifact_paths)
    lat = options.latency
    protocol = latency_protocol_from_options(lat)
    shared = _Shared(levels=levels, options=options, eval_feeds=eval_feeds, out_dir=out_dir,
                     graphs_dir=out_dir / "_level_graphs", protocol=protocol,
                     budget=LatencyBudget(protocol.budget_seconds, len(names) * len(levels)),
                     # ORT's QDQIsInt8Allowed() on this machine (platforms/targets.py)
                     int8_allowed=host_platform().int8_allowed,
                     keep_level_graphs=keep_level_graphs, concurrent_jobs=concurrent_jobs, progress=progress,
                     total=len(names) * len(levels), data_dependent=dict(data_dependent or {}))

    def levels_of(name: str) -> _ArtifactLevels:
        # Lazily: a file's external weights stay on disk until a summary reads one tensor.
        path = Path(artifact_paths[name])
        return _artifact_levels(name, path, loaded.pop(name, None) or graph_from_path(path, lazy=True), shared)

    t_wall = time.perf_counter()
    by_name: dict[str, _ArtifactLevels] = {}
    rest = list(names)
    if rest and rest[0] == "fp32":  # the reference of every other artifact's numerics comes first
        by_name["fp32"] = levels_of("fp32")
        rest = rest[1:]
    # Never with latency on: the eval runs are its timing samples, and a latency is always timed alone.
    two_threads = not lat.enabled and len(rest) > 1 and (parallel if parallel is not None else cores_idle(concurrent_jobs))
    if two_threads:
        # Numerics of independent files on both cores: ORT's sessions release the GIL while they run.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="quantcompare-levels") as pool:
            futures = {n: pool.submit(levels_of, n) for n in rest}
            by_name.update({n: f.result() for n, f in futures.items()})
    else:
        for n in rest:
            by_name[n] = levels_of(n)
    shutil.rmtree(shared.graphs_dir, ignore_errors=True)
    timings = dict(shared.timings)
    if two_threads:
        # Each thread's seconds add up to more than the stage took: the wall time is split between
        # optimize and evaluate in the proportion the threads spent, so the timings still add up.
        wall, summed = time.perf_counter() - t_wall, sum(timings.values())
        timings = {k: v * wall / summed for k, v in timings.items()} if summed > 0 else timings

    results = {n: a.outputs for n, a in by_name.items()}
    output_names = {n: a.output_names for n, a in by_name.items() if a.output_names}
    steps_of = {n: a.steps for n, a in by_name.items()}
    t2 = time.perf_counter()
    agreement = agreement_rows(results, output_names, steps_of, levels, skip=set(shared.data_dependent) | set(shared.drawn))
    timings["evaluate"] += time.perf_counter() - t2
    return LevelsResult(optimized={n: by_name[n].per_level for n in names},
                        agreement=agreement, timings={k: round(v, 4) for k, v in timings.items()},
                        files={n: by_name[n].facts for n in names}, levels=levels,
                        reference_outputs=shared.reference)


def _artifact_levels(name: str, path: Path, file_graph: GraphIndex, shared: _Shared) -> _ArtifactLevels:
    """One artifact at every level: session, saved graph, summary, diff vs the previous level, numerics, latency."""
    options, levels = shared.options, shared.levels
    lat = options.latency
    threads = lat.intra_op_threads
    if name == "fp32":
        shared.fp32_compute = int8_coverage(file_graph).float_count
        shared.drawn = outputs_after_random_draws(file_graph.model)
    fp32_compute = shared.fp32_compute
    facts = file_facts_from_graph(file_graph)
    steps = output_steps(file_graph)
    float_tail = float_tail_nodes(file_graph) if name == "pt2e_qdq" else {}
    prev_graph, prev_level = file_graph, "file"
    prev_outputs: list[np.ndarray] | None = None
    seen: dict[str, str] = {}  # level graph digest -> the first level of this artifact that had it
    per_level: dict[str, OptimizedLevel] = {}
    extended_rows = None  # blockers at extended: the layout levels keep them (no QDQ fusion runs there)
    outputs_at: dict[str, list[np.ndarray]] = {}
    onames: list[str] = []
    for level in levels:
        t0 = time.perf_counter()
        out_file = shared.out_dir / f"{name}.{level}.onnx"
        try:
            session, lg = session_and_level_graph(path, level, shared.graphs_dir / f"{name}.{level}",
                                                     intra_op_threads=threads)
            graph = graph_from_path(lg.graph, lazy=True)  # weights stay on disk until a summary reads one
        except Exception as e:  # noqa: BLE001 - ORT refusing a level is a result, not a crash
            shared.graph_done()
            per_level[level] = OptimizedLevel(level=level, level_value=LEVEL_VALUES[level],
                                              error=scrub(f"session creation failed: {type(e).__name__}: {e}")[:2000])
            shared.step("optimize", "optimize", time.perf_counter() - t0, count=True)
            continue
        session_seconds = time.perf_counter() - t0
        diff = diff_graphs(prev_graph, graph, previous=prev_level)
        if options.attribution and diff.rewrites and level != "disable_all":
            diff = _attribute(diff, path, level, prev_graph, threads)
        structure = level_structure(graph, name=name, level=level, facts=facts, fp32_compute=fp32_compute,
                                    int8_allowed=shared.int8_allowed, extended_rows=extended_rows,
                                    float_tail=float_tail)
        if level == "extended":
            extended_rows = structure.pop("extended_rows")
        structure.pop("extended_rows", None)
        shared.step("optimize", "optimize", time.perf_counter() - t0, count=True)

        t1 = time.perf_counter()
        numerics = latency = None
        error = None
        # ORT often writes the very same graph at another level (``all`` == ``layout`` here for
        # every example): the same graph gives the same outputs and the same speed, so it is
        # neither run nor timed again (the level says which level it equals).
        same_as = seen.get(lg.digest)
        if same_as is not None and same_as not in outputs_at:
            same_as = None  # that level failed to run: measure this one
        try:
            onames = [o.name for o in session.get_outputs()]
            if same_as:
                outputs = outputs_at[same_as]
                if per_level[same_as].latency is not None:
                    latency = per_level[same_as].latency.model_copy(update={"timed_with": same_as})
            else:
                outputs, latency = outputs_and_latency(session, shared.eval_feeds, shared.protocol, shared.budget,
                                                    timing=lat.enabled, concurrent_jobs=shared.concurrent_jobs)
            outputs_at[level] = outputs
            if name == "fp32" and shared.reference is None:
                shared.reference, shared.reference_names = outputs, onames
            if shared.reference is not None:
                numerics = level_numerics(shared.reference, shared.reference_names, outputs, onames, steps=steps,
                                          previous=prev_outputs, samples=len(shared.eval_feeds),
                                          data_dependent=shared.data_dependent, drawn=shared.drawn)
            prev_outputs = outputs
        except Exception as e:  # noqa: BLE001 - a kernel failing at run time is a finding
            error = scrub(f"run failed: {type(e).__name__}: {e}")[:2000]
        evaluate_seconds = time.perf_counter() - t1  # the runs and numerics, not the graph's save below
        del session
        shared.graph_done()
        seen.setdefault(lg.digest, level)
        if shared.keep_level_graphs:
            self_contained_from_level_graph(lg, out_file)
        shutil.rmtree(lg.folder, ignore_errors=True)  # the weights: a download makes them again
        shared.step("evaluate", "evaluate", time.perf_counter() - t1, count=False)

        per_level[level] = OptimizedLevel(
            level=level, level_value=LEVEL_VALUES[level], file=out_file.name, error=error, **structure,
            diff=diff, numerics=numerics, latency=latency,
            session_seconds=session_seconds, evaluate_seconds=round(evaluate_seconds, 4), same_graph_as=same_as,
            graph_sha256=lg.graph_sha256, weights_sha256=lg.data_sha256, graph_bytes=lg.graph_bytes,
            weights_bytes=lg.data_bytes, download_bytes=self_contained_bytes(graph.model, lg.folder),
            file_stored=shared.keep_level_graphs,
        )
        prev_graph, prev_level = graph, level
    return _ArtifactLevels(per_level=per_level, facts=facts, outputs=outputs_at, output_names=onames, steps=steps)


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
