"""Latency that can be trusted, or says that it cannot: an adaptive protocol per session.

The protocol (its text goes into every ``LatencyStats.protocol``):

1. A level graph is timed alone, after the job's accuracy runs (which run untimed, on every core the
   job has: ``parallel_runs.py``), on a session of its own with ``intra_op_threads`` threads, on the
   first evaluation feed (it has the resolved input shapes). The first ``warmup`` runs (at least one:
   the first run of a session grows the arena and pays first-call allocations) are not timed; a graph
   whose run takes under ``SHORT_RUN_MS`` gets ``SHORT_RUN_WARMUP`` more untimed runs (such runs are
   mostly per-call cost that a few runs warm).
2. Then that feed is run until the median is stable: the distribution-free 95%
   confidence interval of the median (order statistics: ranks n/2 -+ 0.98*sqrt(n)) spans at
   most ``2 * stable_rel`` of the median, after at least ``min_runs`` timed runs; or until
   ``max_runs`` timed runs, or the graph's share of the job's time budget is spent.
3. Reported: median, p10/p90, spread ((p90-p10)/median), the runs, whether it became stable,
   and the load while it was measured: the 1-minute load average, the jobs running at once in
   the service, and the CPU share the timed runs got (process CPU time / (wall time x threads), summed
   over the timed runs: below 1 when the scheduler gave the cores to someone else).
4. ``noisy`` when the median never became stable, the spread is wide, the timed runs did not
   get their cores, or the machine was oversubscribed (load average or jobs x threads above
   the cores). A noisy figure is shown as such; a latency gate says so instead of calling it a
   regression.

Latency is always timed alone: nothing else of this job runs while a session is timed. Only the levels
of ``options.latency_levels`` are timed (every level at depth "full"; ``options.timed_levels``).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from service.pipeline.environment import usable_cores
from service.schemas.levels import LatencyStats

__all__ = [
    "LatencyProtocol", "LoadProbe", "Timing", "median_ci", "is_stable", "load_snapshot", "timed_run",
    "latency_from_samples", "latency_from_times", "top_up", "latency_alone", "PROTOCOL_TEXT",
]

# A run this short is mostly per-call cost (binding, output allocation, cold caches) that one
# untimed run does not warm: such samples read 20-40% above an independent median (0.05-0.1 ms graphs;
# docs/history/results.md, second run). Those graphs get SHORT_RUN_WARMUP more untimed runs: at this
# length that costs at most (3 + max_runs) x 2 ms.
SHORT_RUN_MS = 2.0
SHORT_RUN_WARMUP = 3

PROTOCOL_TEXT = (
    "timed alone after the accuracy runs, on a session of its own: {warmup} untimed run(s) of the first eval "
    "feed ({short_warmup} more when a run takes under {short_ms:g} ms), then that feed again until the 95% "
    "order-statistic interval of the median is within +-{stable_pct:g}% of it "
    "(at least {min_runs}, at most {max_runs} timed runs, {budget:g} s budget per job shared by the "
    "distinct graphs timed); identical level graphs timed once; {threads} intra-op "
    "thread(s); noisy when not stable, spread (p90-p10)/median > {spread_pct:g}%, CPU share < "
    "{share_pct:g}%, or the machine was oversubscribed"
)


@dataclass(frozen=True)
class LatencyProtocol:
    min_runs: int = 5
    max_runs: int = 10
    warmup: int = 1  # untimed runs before the first timed one (the first eval run counts)
    stable_rel: float = 0.05  # half-width of the median's 95% interval, relative to the median
    budget_seconds: float = 60.0  # for the whole job's latency top-ups
    noisy_spread: float = 0.25  # (p90 - p10) / median
    noisy_cpu_share: float = 0.85
    intra_op_threads: int = 1

    def text(self) -> str:
        return PROTOCOL_TEXT.format(warmup=max(1, self.warmup), short_ms=SHORT_RUN_MS, short_warmup=SHORT_RUN_WARMUP,
                                    stable_pct=self.stable_rel * 100, min_runs=self.min_runs,
                                    max_runs=self.max_runs, budget=self.budget_seconds,
                                    threads=self.intra_op_threads, spread_pct=self.noisy_spread * 100,
                                    share_pct=self.noisy_cpu_share * 100)


@dataclass(frozen=True)
class Timing:
    """One timed ``session.run``: wall milliseconds and the CPU share the process got in it."""

    ms: float
    cpu_share: float


@dataclass(frozen=True)
class LoadSnapshot:
    load_avg_1m: float | None
    concurrent_jobs: int | None
    cpu_count: int


LoadProbe = Callable[[], int | None]  # jobs running at once in the service (this one included)


def load_snapshot(concurrent_jobs: LoadProbe | None = None) -> LoadSnapshot:
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - not on Linux
        load = None
    jobs = None
    if concurrent_jobs is not None:
        try:
            jobs = concurrent_jobs()
        except Exception:  # noqa: BLE001 - a probe failing must not fail a measurement
            jobs = None
    return LoadSnapshot(load_avg_1m=load, concurrent_jobs=jobs, cpu_count=usable_cores())



def timed_run(run: Callable[[], object], threads: int) -> tuple[object, Timing]:
    """Run once; the wall time and the share of ``threads`` cores the process got meanwhile."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = run()
    c1, t1 = time.process_time(), time.perf_counter()
    wall = max(t1 - t0, 1e-9)
    return out, Timing(ms=wall * 1000.0, cpu_share=min(1.0, (c1 - c0) / (wall * threads)))


def median_ci(values: Sequence[float]) -> tuple[float, float]:
    """Distribution-free ~95% interval of the median from order statistics (ranks n/2 -+ 0.98 sqrt n)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    lo = max(1, math.floor(n / 2 - 0.98 * math.sqrt(n)))
    hi = min(n, math.ceil(1 + n / 2 + 0.98 * math.sqrt(n)))
    return xs[lo - 1], xs[hi - 1]


def is_stable(values: Sequence[float], *, min_runs: int, stable_rel: float) -> bool:
    if len(values) < max(min_runs, 1):
        return False
    lo, hi = median_ci(values)
    med = float(np.median(values))
    return med > 0 and (hi - lo) <= 2 * stable_rel * med


def top_up(run: Callable[[], object], samples: list[Timing], protocol: LatencyProtocol, *,
           deadline: float) -> list[Timing]:
    """Time ``run`` until the median of ``samples`` is stable, ``max_runs`` or ``deadline`` (perf_counter).

    ``min_runs`` are always reached, whatever the deadline: a figure from fewer is not a figure.
    """
    samples = list(samples)
    while len(samples) < protocol.max_runs:
        ms = [s.ms for s in samples]
        if is_stable(ms, min_runs=protocol.min_runs, stable_rel=protocol.stable_rel):
            break
        if len(samples) >= protocol.min_runs and time.perf_counter() >= deadline:
            break
        _, t = timed_run(run, protocol.intra_op_threads)
        samples.append(t)
    return samples


def _median_p10_p90(ms) -> tuple[float, float, float]:
    med = float(np.median(ms))
    p10, p90 = (float(v) for v in np.percentile(ms, [10, 90]))
    return med, p10, p90


def latency_from_times(ms: Sequence[float], *, warmup: int, intra_op_threads: int, **fields) -> LatencyStats:
    """A fixed count of timed runs (ms, as they came) as ``LatencyStats``: where the adaptive protocol does
    not run (a runner script in another process, a retry's before/after)."""
    med, p10, p90 = _median_p10_p90(np.asarray(ms, dtype=np.float64))
    return LatencyStats(median_ms=med, p90_ms=p90, p10_ms=p10, runs=len(ms), warmup=warmup,
                        intra_op_threads=intra_op_threads, **fields)


def latency_from_samples(samples: Sequence[Timing], protocol: LatencyProtocol, *, warmup: int,
                         before: LoadSnapshot, after: LoadSnapshot,
                         batch: dict[str, list[int]]) -> dict:
    """The fields of ``LatencyStats`` for these samples (a dict, so the schema stays the one place)."""
    ms = np.asarray([s.ms for s in samples], dtype=np.float64)
    med, p10, p90 = _median_p10_p90(ms)
    lo, hi = median_ci(ms.tolist())
    spread = (p90 - p10) / med if med > 0 else 0.0
    stable = is_stable(ms.tolist(), min_runs=protocol.min_runs, stable_rel=protocol.stable_rel)
    # Over all timed runs, not a median of per-run shares: a run shorter than the scheduler's slice
    # is rarely preempted, so when the cores are shared the median run still got its whole core;
    # the time lost shows only in the runs that waited, and the sum counts those.
    share = float(sum(s.cpu_share * s.ms for s in samples) / max(sum(s.ms for s in samples), 1e-12))
    loads = [x.load_avg_1m for x in (before, after) if x.load_avg_1m is not None]
    load = max(loads) if loads else None
    jobs_seen = [x.concurrent_jobs for x in (before, after) if x.concurrent_jobs is not None]
    jobs = max(jobs_seen) if jobs_seen else None
    cores = after.cpu_count
    threads = protocol.intra_op_threads
    reasons = []
    if not stable:
        reasons.append(f"median not stable after {len(ms)} runs (95% interval {lo:.3g}-{hi:.3g} ms)")
    if spread > protocol.noisy_spread:
        reasons.append(f"spread (p90-p10)/median {spread:.0%}")
    if share < protocol.noisy_cpu_share:
        reasons.append(f"the timed runs got {share:.0%} of their {threads} core(s)")
    if load is not None and load > cores + 0.5:
        reasons.append(f"load average {load:.2f} on {cores} cores")
    if jobs is not None and jobs * threads > cores:
        reasons.append(f"{jobs} jobs running at once on {cores} cores")
    return dict(
        median_ms=med, p90_ms=p90, p10_ms=p10, runs=len(ms), warmup=warmup,
        intra_op_threads=threads, batch=batch, median_ci_ms=[float(lo), float(hi)], spread=spread,
        stable=stable, cpu_share=share, load_avg_1m=load, concurrent_jobs=jobs, noisy=bool(reasons),
        noisy_reasons=reasons,
    )


class LatencyBudget:
    """The job's top-up seconds, shared by the graphs still to time: each gets (left / graphs left)."""

    def __init__(self, seconds: float, graphs: int):
        self.left = float(seconds)
        self.graphs_left = max(1, int(graphs))

    def deadline(self) -> float:
        return time.perf_counter() + max(0.0, self.left) / max(1, self.graphs_left)

    def spend(self, seconds: float) -> None:
        self.left -= seconds

    def graph_done(self) -> None:
        self.graphs_left = max(1, self.graphs_left - 1)


def latency_protocol_from_options(lat) -> LatencyProtocol:
    """``LatencyOptions`` (options.latency) -> the protocol: ``runs`` is the most timed runs per graph."""
    return LatencyProtocol(min_runs=min(lat.min_runs, lat.runs), max_runs=lat.runs, warmup=lat.warmup,
                           stable_rel=lat.stable_rel, budget_seconds=lat.budget_seconds,
                           intra_op_threads=lat.intra_op_threads)


def latency_alone(session, feed: dict, protocol: LatencyProtocol, budget: LatencyBudget, *,
                  concurrent_jobs: LoadProbe | None = None) -> LatencyStats:
    """The latency of ``session`` (made with ``protocol.intra_op_threads``) on ``feed``, by the protocol:
    untimed warm-up runs, then timed runs until the median is stable (``top_up``). The caller runs
    nothing else of the job meanwhile."""
    before = load_snapshot(concurrent_jobs)
    threads = protocol.intra_op_threads
    warmup = max(1, protocol.warmup)
    first = None
    for _ in range(warmup):
        _, first = timed_run(lambda: session.run(None, feed), threads)
    if first is not None and first.ms < SHORT_RUN_MS:
        for _ in range(SHORT_RUN_WARMUP):
            session.run(None, feed)
        warmup += SHORT_RUN_WARMUP
    t0 = time.perf_counter()
    samples = top_up(lambda: session.run(None, feed), [], protocol, deadline=budget.deadline())
    budget.spend(time.perf_counter() - t0)
    after = load_snapshot(concurrent_jobs)
    batch = {k: list(np.shape(v)) for k, v in feed.items()}
    stats = latency_from_samples(samples, protocol, warmup=warmup, before=before, after=after, batch=batch)
    return LatencyStats(**stats, protocol=protocol.text())
