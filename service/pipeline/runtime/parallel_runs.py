"""Accuracy runs on every core the job has: the evaluation feeds of one session, run side by side.

Accuracy is untimed, so nothing stops it from using the job's cores (``job_cores``). Each session
here has one intra-op thread, and ``cores`` threads call ``session.run`` on it at once, each on its
own feed: ORT's ``InferenceSession::Run`` may be called concurrently, and with one intra-op thread a
run executes on the thread that calls it, start to finish (the Python binding releases the GIL while
it runs). Each feed is then computed exactly as a lone one-thread run computes it, by the same kernels
in the same order, so the outputs are bit for bit those of one core: the accuracy figures cannot depend
on the core count. (More intra-op threads on one session split a kernel's work between threads, which
need not add up in the same order; and ``bench/accuracy_cores.py`` measured the parallel runs faster
here: ``docs/CONTRACTS.md``, "Job cores".)

A graph that draws random numbers (``vocabulary.RANDOM_OPS``) runs its feeds one after the other: its
kernels' generators are shared by the session's runs, so which sample gets which draw would follow the
threads' order.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar, Union

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["Cores", "cores_now", "runs_on_cores", "ACCURACY_HOW"]

# A figure, or what gives the job's share at this moment (``pipeline/cores.py``: ``CoreShare.now``).
Cores = Union[int, Callable[[], int]]

ACCURACY_HOW = ("accuracy runs untimed on {cores} core(s): each session with one intra-op thread, {cores} of its "
                "evaluation feeds run at once (outputs bit for bit a lone one-thread run's); latency timed alone "
                "afterwards")


def cores_now(cores: Cores) -> int:
    """The cores to use for the batch about to start (at least one)."""
    return max(1, int(cores() if callable(cores) else cores))


def runs_on_cores(run: Callable[[T], R], items: Sequence[T], cores: Cores, *, sequential: bool = False) -> list[R]:
    """``[run(item) for item in items]``, computed on ``cores`` threads at once (results in item order).

    ``cores`` is read once, as the batch starts. ``run`` runs a session with one intra-op thread: one session on each feed, or (the per-tensor table)
    each file's session on one feed. ``sequential``: one item after the other (a graph with random ops).
    The first exception raised by a run is raised here."""
    items = list(items)
    workers = 1 if sequential or len(items) < 2 else min(cores_now(cores), len(items))
    if workers == 1:
        return [run(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="quantcompare-accuracy") as pool:
        return list(pool.map(run, items))
