"""The adaptive latency protocol: true medians, stable stops, and noise said out loud."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.ort.sessions import session_for
from tests.latency_oracle import independent_median
from service.pipeline.runtime.latency import (
    SHORT_RUN_MS,
    SHORT_RUN_WARMUP,
    LatencyBudget,
    LatencyProtocol,
    Timing,
    is_stable,
    median_ci,
    latency_alone,
    top_up,
)


ROWS = 256  # 6 x 2 x 256 x 384 x 384 = 0.45 GFLOP: several ms, well above SHORT_RUN_MS on any core


def _matmul_chain(path, n: int = 384, depth: int = 6) -> None:
    """A model that takes several milliseconds on one thread: long enough for timer noise not to matter,
    and timed from its eval runs (above SHORT_RUN_MS)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        inits.append(numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"]))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, n])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [ROWS, n])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    path = tmp_path_factory.mktemp("latency") / "chain.onnx"
    _matmul_chain(path)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((ROWS, 384)).astype(np.float32)} for _ in range(8)]
    return path, feeds


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One Add on [1, 8]: a run of a few microseconds, all per-call cost (SHORT_RUN_MS applies)."""
    path = tmp_path_factory.mktemp("latency") / "tiny.onnx"
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    rng = np.random.default_rng(2)
    return path, [{"x": rng.standard_normal((1, 8)).astype(np.float32)} for _ in range(8)]


@pytest.mark.parametrize("model", ["chain", "tiny"])
def test_the_reported_median_is_within_15_percent_of_an_independent_7_run_median_or_says_it_is_noisy(model, request):
    path, feeds = request.getfixturevalue(model)
    protocol = LatencyProtocol(intra_op_threads=1)
    seen = []
    # A latency is true, or says that it is not: a median more than 15% off an independent 7-run
    # median must come marked noisy. On a shared 2-core machine another job can land on either
    # measurement, so one of three back-to-back pairs has to hold; a protocol that is off on a quiet
    # machine (timing the first, cold run, the eval loop's Python, or a microsecond graph's eval
    # runs over changing feeds) fails all three.
    for _ in range(3):
        session = session_for(path, "all", intra_op_threads=1)
        lat = latency_alone(session, feeds[0], protocol, LatencyBudget(30, 1))
        ratio = lat.median_ms / independent_median(path, feeds[0])
        seen.append((round(ratio, 3), lat.noisy, lat.noisy_reasons))
        if abs(ratio - 1) <= 0.15 or lat.noisy:
            break
    assert any(abs(r - 1) <= 0.15 or noisy for r, noisy, _ in seen), seen
    assert lat.runs >= protocol.min_runs
    assert lat.runs_from_eval == 0  # accuracy runs untimed (issue 39): no evaluation run is a sample
    if lat.median_ms >= SHORT_RUN_MS:
        assert model == "chain" and lat.warmup == protocol.warmup
    else:  # a run of microseconds: more untimed runs first, and the warm-up says so
        assert model == "tiny" and lat.warmup == protocol.warmup + SHORT_RUN_WARMUP
    assert lat.median_ci_ms[0] <= lat.median_ms <= lat.median_ci_ms[1]
    assert lat.protocol and "order-statistic" in lat.protocol and f"under {SHORT_RUN_MS:g} ms" in lat.protocol
    assert lat.load_avg_1m is not None and 0 < lat.cpu_share <= 1


def test_latency_alone_runs_only_the_first_feed_after_untimed_warmup(chain):
    """Timing is apart from the accuracy runs: warm-up, then the first feed until the median is stable."""
    path, feeds = chain
    session = session_for(path, "all", intra_op_threads=1)
    fed = []
    real_run = session.run

    class Counting:
        def run(self, names, feed, *a):
            fed.append(feed)
            return real_run(names, feed, *a)

    protocol = LatencyProtocol(intra_op_threads=1, stable_rel=100.0, warmup=2)  # any 5 runs count as "stable"
    lat = latency_alone(Counting(), feeds[0], protocol, LatencyBudget(30, 1))
    assert all(f is feeds[0] for f in fed)
    assert len(fed) == 2 + protocol.min_runs and lat.runs == protocol.min_runs and lat.warmup == 2


def test_median_interval_and_stability_from_order_statistics():
    assert median_ci([5, 1, 4, 2, 3]) == (1, 5)  # n=5: the whole range
    xs = list(range(1, 21))
    assert median_ci(xs) == (5, 16)  # n=20: ranks 5 and 16 (the binomial table says 6 and 15: ours is wider)
    assert is_stable([10.0, 10.1, 9.9, 10.05, 10.0], min_runs=5, stable_rel=0.05)
    assert not is_stable([10.0, 10.1, 9.9, 10.05], min_runs=5, stable_rel=0.05)  # too few
    assert not is_stable([10.0, 14.0, 9.0, 10.0, 12.0], min_runs=5, stable_rel=0.05)


def test_top_up_stops_at_max_runs_when_never_stable_and_always_reaches_min_runs():
    values = iter([1.0, 3.0] * 50)
    protocol = LatencyProtocol(min_runs=4, max_runs=9, intra_op_threads=1)
    out = top_up(lambda: time.sleep(0), [], protocol, deadline=time.perf_counter() + 60)
    assert protocol.min_runs <= len(out) <= protocol.max_runs
    # An expired budget still gives min_runs.
    out = top_up(lambda: None, [], protocol, deadline=time.perf_counter() - 1)
    assert len(out) == protocol.min_runs
    # Samples that alternate 1 and 3 ms never become stable: max_runs, then stop.
    fake = [Timing(ms=next(values), cpu_share=1.0) for _ in range(4)]
    out = top_up(lambda: None, fake, LatencyProtocol(min_runs=4, max_runs=6, stable_rel=0.01, intra_op_threads=1),
                 deadline=time.perf_counter() + 60)
    assert len(out) == 6


@pytest.mark.heavy
def test_a_latency_measured_while_the_cores_are_busy_is_marked_noisy(chain):
    """Three busy processes share one CPU with the timed runs, whatever the machine's size.

    All four are pinned to the same CPU, so the scheduler must split it: the timed runs cannot
    get their core, on 2 CPUs or on 64 (a test that trusted "3 hogs > 2 cores" passed on one
    machine and not on the next).
    """
    path, feeds = chain
    saved = os.sched_getaffinity(0)
    cpu = {min(saved)}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, cpu)
        os.sched_setaffinity(0, cpu)
        time.sleep(0.5)
        session = session_for(path, "all", intra_op_threads=1)
        lat = latency_alone(session, feeds[0], LatencyProtocol(intra_op_threads=1), LatencyBudget(10, 1),
                            concurrent_jobs=lambda: 3)
    finally:
        os.sched_setaffinity(0, saved)
        for h in hogs:
            h.kill()
            h.wait()
    assert lat.noisy
    assert lat.concurrent_jobs == 3 and "3 jobs running at once" in " ".join(lat.noisy_reasons)
    # The direct evidence: four runnable processes on one CPU leave the timed runs well short of it.
    assert lat.cpu_share < 0.85 and any("of their 1 core" in r for r in lat.noisy_reasons), lat
