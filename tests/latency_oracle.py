"""The latency oracle the report's figures are held to (tests/pipeline/runtime/test_latency_protocol.py,
bench/job_budget.py): a fresh one-thread session at ``all``, 3 untimed runs, then the median of plain
perf_counter timings. Written apart from the product's latency code on purpose: it checks that code."""

from __future__ import annotations

import time

import numpy as np

from service.pipeline.ort.sessions import session_for


def independent_median(path, feed: dict, runs: int = 7) -> float:
    s = session_for(path, "all", intra_op_threads=1)
    for _ in range(3):
        s.run(None, feed)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, feed)
        times.append((time.perf_counter() - t) * 1000)
    return float(np.median(times))
