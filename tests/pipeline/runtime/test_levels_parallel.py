"""Without latency, the quantized artifacts' levels run on two threads and report what one thread reports."""

from __future__ import annotations

import threading
import time

from service.schemas.options import ComparisonOptions
from service.pipeline.runtime.levels import analyze_levels

# session_seconds, evaluate_seconds: wall time. nodes, diff: ORT's NchwcTransformer (x86) writes fp32's
# layout graph in an order and with node names that vary per session (level_graphs.py), one thread or two;
# compared below by what does not depend on that order.
VOLATILE = {"session_seconds", "evaluate_seconds", "nodes", "diff"}


def _feeds(report):
    import numpy as np

    shape = report.model.resolved_input_shapes["x"]
    rng = np.random.default_rng(3)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(3)]


def _levels(workdir, report, tmp_path, *, parallel, latency):
    options = ComparisonOptions(levels=["disable_all", "basic", "all"], latency={"enabled": latency, "runs": 5})
    art = workdir / "artifacts"
    paths = {a: art / f"{a}.onnx" for a in ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator")}
    threads = set()
    t0 = time.perf_counter()
    result = analyze_levels(artifact_paths=paths, eval_feeds=_feeds(report), out_dir=tmp_path / f"p{parallel}{latency}",
                            options=options, parallel=parallel, keep_level_graphs=False,
                            progress=lambda *_: threads.add(threading.current_thread().name))
    result.timings["_call"] = time.perf_counter() - t0
    return result, threads


def test_two_threads_report_what_one_thread_reports(compared, tmp_path):
    report, workdir = compared("op_zoo_net")
    one, one_threads = _levels(workdir, report, tmp_path, parallel=False, latency=False)
    two, two_threads = _levels(workdir, report, tmp_path, parallel=True, latency=False)
    assert len({t for t in two_threads if t.startswith("quantcompare-levels")}) == 2  # both cores were used
    assert not any(t.startswith("quantcompare-levels") for t in one_threads)
    assert set(two.timings) == set(one.timings) == {"optimize", "evaluate", "_call"}
    # Two threads' seconds are not reported as more time than the stage took.
    assert two.timings["optimize"] + two.timings["evaluate"] <= two.timings["_call"]
    assert list(two.optimized) == list(one.optimized)  # fp32 first, then the artifacts in order
    for art, per_level in one.optimized.items():
        for level, ol in per_level.items():
            other = two.optimized[art][level]
            assert other.model_dump(exclude=VOLATILE) == ol.model_dump(exclude=VOLATILE), (art, level)
            assert sorted(n.op_type for n in other.nodes) == sorted(n.op_type for n in ol.nodes)
            # (how the NCHWc rewrites group follows ORT's node order, so only the counts are compared)
            counts = lambda d: d and (d.nodes_removed, d.nodes_added)  # noqa: E731
            assert counts(other.diff) == counts(ol.diff), (art, level)
    assert [a.model_dump() for a in two.agreement] == [a.model_dump() for a in one.agreement]


def test_with_latency_the_levels_stay_on_one_thread(compared, tmp_path):
    report, workdir = compared("conv_relu")
    result, threads = _levels(workdir, report, tmp_path, parallel=True, latency=True)
    assert not any(t.startswith("quantcompare-levels") for t in threads)  # a latency is always timed alone
    assert result.optimized["ort_qdq"]["all"].latency is not None
