"""Where the time goes: one run under ORT's own profiler, node by node, outside the timed runs.

Wherever a level graph is timed (``levels._latency_phase``), a session of its own is made after the timed
session is gone, with ``SessionOptions.enable_profiling``: ``PROFILE_WARMUP`` untimed runs, then the
profiled run. ORT's profiler writes every run of that session into one JSON trace (Chrome trace format);
only the events inside the last ``model_run`` are read. The timed runs never run under the profiler
(a session's profiling is fixed when it is created), and the trace says how many runs it saw
(``runs_in_profile``: the warm-up and the profiled run, never the timed ones).

From the trace, per node event ``<node>_kernel_time``: ``args.op_name`` (ORT's kernel, no domain),
``dur`` (microseconds) and ``args.input_type_shape``, from which the kernel's operand types are named
as MLAS names its int8 GEMMs (int8 compute kernels only: QLinearConv, QLinearMatMul, QGemm, ...): the first
two integer inputs of more than one element, ``int8`` -> ``s8``,
``uint8`` -> ``u8`` (QLinearConv on int8 activations and int8 weights: ``s8s8``; ``u8s8`` after
QDQS8ToU8Transformer). ``total_ms`` is ORT's own time for the run (``SequentialExecutor::Execute``);
the node times add up to it within a few percent once kernels dominate; what they leave is
``unattributed_ms``: the executor's and the profiler's own time between nodes, a few microseconds per
node, which is most of a graph of 0.1 ms and a third of a 320x320 YOLOv8n's profiled run (bench/profile_overhead.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from service.pipeline.ort.sessions import session_options_for, session_with_options
from service.pipeline.runtime.latency import SHORT_RUN_MS, SHORT_RUN_WARMUP
from service.pipeline.vocabulary import COMPUTE_OPS, INT8_COMPUTE_KERNELS, INT8_KERNELS, LAYOUT_OPS, QDQ_OPS
from service.schemas.levels import OpProfile, ProfiledNode

__all__ = ["profile_of", "profile_from_trace", "kernel_of", "op_class", "where_it_loses", "PROFILE_WARMUP",
           "CLASSES"]

PROFILE_WARMUP = 1  # an unread run first, as the latency protocol's default: a session's first run grows its arena
# (SHORT_RUN_WARMUP more for a short graph); one is enough, and each costs an inference on a real-size model
TOP_NODES = 10
CLASSES = ("int8 kernels", "float kernels", "Q/DQ", "layout", "other")
_BARE = lambda names: frozenset(n.rsplit(".", 1)[-1] for n in names)  # noqa: E731 - the profile names no domain
_INT8 = _BARE(INT8_KERNELS)
_GEMM = _BARE(INT8_COMPUTE_KERNELS)  # the int8 kernels MLAS runs as a GEMM, whose operand types name its path
_FLOAT = _BARE(COMPUTE_OPS)
_QDQ = _BARE(QDQ_OPS) | {"DynamicQuantizeLinear"}
_SHORT = {"int8": "s8", "uint8": "u8", "int16": "s16", "uint16": "u16", "int4": "s4", "uint4": "u4"}


def op_class(op_name: str) -> str:
    if op_name in _QDQ:
        return "Q/DQ"
    if op_name in _INT8 or op_name.startswith("QLinear"):
        return "int8 kernels"
    if op_name in _FLOAT:
        return "float kernels"
    if op_name in LAYOUT_OPS:
        return "layout"
    return "other"


def kernel_of(args: dict) -> str | None:
    """The kernel's operand types as the trace gives them: ``s8s8``, ``u8s8``, ... for an int8 compute
    kernel (its first two integer inputs of more than one element: activations, weights); ``f32`` for a
    float compute op; None otherwise."""
    if args.get("op_name") in _FLOAT:
        return "f32"
    if args.get("op_name") not in _GEMM:
        return None
    ints = []
    for t in args.get("input_type_shape", []):
        (dtype, shape), = t.items()
        if dtype in _SHORT and shape and _elements(shape) > 1:
            ints.append(_SHORT[dtype])
    return "".join(ints[:2]) if len(ints) >= 2 else None


def _elements(shape: list) -> int:
    n = 1
    for d in shape:
        n *= int(d) if isinstance(d, int) and d > 0 else 1
    return n


def profile_from_trace(events: list[dict]) -> dict:
    """The fields of ``OpProfile`` from ORT's trace, read within its last ``model_run``."""
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    if not runs:
        raise ValueError("ORT's profile holds no model_run")
    last = runs[-1]
    t0, t1 = last["ts"], last["ts"] + last["dur"]
    execute = [e for e in events if e.get("name") == "SequentialExecutor::Execute" and t0 <= e["ts"] <= t1]
    nodes = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
             and t0 <= e["ts"] <= t1]
    total_us = float(execute[-1]["dur"]) if execute else float(last["dur"])
    by_op, by_class, counts = defaultdict(float), {c: 0.0 for c in CLASSES}, Counter()
    kernels: dict[str, Counter] = defaultdict(Counter)  # int8 op -> kernel -> nodes
    by_kernel: dict[str, float] = defaultdict(float)
    rows = []
    for e in nodes:
        args = e.get("args", {})
        op = args.get("op_name") or "?"
        ms = e["dur"] / 1000.0
        by_op[op] += ms
        by_class[op_class(op)] += ms
        counts[op] += 1
        kernel = kernel_of(args)
        if kernel and op_class(op) == "int8 kernels":
            kernels[op][kernel] += 1
        if kernel:
            by_kernel[kernel] += ms
        rows.append((ms, e["name"].removesuffix("_kernel_time"), op, kernel))
    total_ms = total_us / 1000.0
    rows.sort(key=lambda r: -r[0])
    top = [ProfiledNode(node=n, op_type=op, ms=round(ms, 4), share=round(ms / total_ms, 4) if total_ms else 0.0,
                        kernel=k) for ms, n, op, k in rows[:TOP_NODES]]
    kernels_ms = sum(r[0] for r in rows)
    return dict(total_ms=round(total_ms, 4), kernels_ms=round(kernels_ms, 4),
                unattributed_ms=round(max(0.0, total_ms - kernels_ms), 4),
                by_op_type={k: round(v, 4) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])},
                by_class={k: round(v, 4) for k, v in by_class.items()}, op_counts=dict(counts),
                kernels={op: dict(c) for op, c in kernels.items()},
                by_kernel={k: round(v, 4) for k, v in by_kernel.items()}, top_nodes=top, runs_in_profile=len(runs))


def profile_of(path: Path, level: str, feed: dict, *, threads: int, median_ms: float | None,
               session_config: dict[str, str] | None = None) -> OpProfile:
    """``path`` at ``level`` on ``feed``, profiled by ORT on a session of its own (never a timed one);
    ``median_ms``: the timed median, against which the profiler's overhead is stated; ``session_config``:
    the timed session's ORT session config entries (the job's ``options.ort_session``)."""
    folder = Path(tempfile.mkdtemp(prefix="qc-profile-"))
    try:
        so = session_options_for(level, intra_op_threads=threads, session_config=session_config)
        so.enable_profiling = True
        so.profile_file_prefix = str(folder / "ort")
        session = session_with_options(path, so)
        warmup = PROFILE_WARMUP
        for _ in range(PROFILE_WARMUP):
            t = time.perf_counter()
            session.run(None, feed)
        if (time.perf_counter() - t) * 1000.0 < SHORT_RUN_MS:  # as the latency protocol warms so short a graph
            for _ in range(SHORT_RUN_WARMUP):
                session.run(None, feed)
            warmup += SHORT_RUN_WARMUP
        t = time.perf_counter()
        session.run(None, feed)
        wall_ms = (time.perf_counter() - t) * 1000.0
        trace = Path(session.end_profiling())
        del session
        fields = profile_from_trace(json.loads(trace.read_text()))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    overhead = round(wall_ms / median_ms - 1.0, 4) if median_ms else None
    return OpProfile(**fields, warmup=warmup, profiled_run_ms=round(wall_ms, 4), overhead=overhead,
                     how=f"ORT's profiler (enable_profiling) on a session of its own after the timed runs: "
                         f"{warmup} unread run(s), then one profiled run of the first eval feed, "
                         f"{threads} intra-op thread(s); node times are its <node>_kernel_time events, total_ms "
                         "its SequentialExecutor::Execute; overhead = that run's wall time / the timed median - 1")


def where_it_loses(artifact: str, level: str, profile: OpProfile, median_ms: float | None,
                   fp32_median_ms: float | None) -> str | None:
    """One sentence where ``artifact`` is slower than fp32 at ``level`` (timed medians): the op type that
    takes the most of its profiled time, how many nodes, and on which kernels, as the trace names them."""
    if not median_ms or not fp32_median_ms or median_ms <= fp32_median_ms or not profile.by_op_type:
        return None
    op, ms = next(iter(profile.by_op_type.items()))
    share = ms / profile.total_ms if profile.total_ms else 0.0
    kernels = Counter(profile.kernels.get(op) or {})
    on = f" on {kernels.most_common(1)[0][0]} kernels" if kernels else " (float)" if op_class(op) == "float kernels" else ""
    return (f"{artifact} at {level}: {share:.0%} of the time in {profile.op_counts.get(op, 0)} {op}{on} "
            f"({median_ms / fp32_median_ms:.2f}x fp32's median)")
