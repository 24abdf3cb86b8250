"""The PT2E path and the ORT paths side by side, on two cores, when the machine has them idle.

The two paths share nothing but their inputs (the fp32 file, the program, the samples), and each
runs mostly on one core: torch.export, PT2E calibration and the ONNX export on one, ORT's
pre-processing and calibration sessions on the other. Threads, not processes: the PT2E path is
the only one that calls torch.export (which is not thread-safe with itself), and ORT's sessions
and torch's kernels release the GIL, which is where the two paths spend their time.

Each path on one core, which torch does not do by itself: its intra-op pool takes every core, and
beside ORT's calibration session the two pools fought over two cores (the PT2E path of a 72 MB CenterNet
took 75 s instead of 43 s with torch on one thread, on a loaded machine). torch runs on one thread while
the ORT paths run beside it, and the PT2E path takes its threads back between its steps once they are done
(``reclaim_idle_core``): the ORT paths finish first, and the second core would idle through the rest of
calibration and the export. compare.quantize_stage keeps torch on one thread when the paths run one after
the other on a machine that is not idle.

Only when the cores are idle: with another job running (or the load average above what this
job adds) a second thread only steals a core from someone else and the job takes as long.
Latency is never measured here: the levels stage runs after both paths are done.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, TypeVar


A = TypeVar("A")
B = TypeVar("B")


def side_by_side(first: Callable[[], A], second: Callable[[], B], *, parallel: bool) -> tuple[A, B]:
    """``first()`` here and ``second()`` on a thread when ``parallel``; else one after the other."""
    if not parallel:
        return first(), second()
    me = threading.get_ident()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="quantcompare-ort-path") as pool:
        later = pool.submit(second)
        with torch_on_one_core() as before:
            _SHARING[me] = (later, before)
            try:
                a = first()
            finally:
                _SHARING.pop(me, None)
        return a, later.result()


# thread running ``first`` -> (the other path's future, torch's threads before side_by_side)
_SHARING: dict[int, tuple[Future, int]] = {}


def reclaim_idle_core() -> None:
    """For the torch path, between its steps: once the path beside it is done, torch gets back the threads
    it had. torch's thread count holds for the thread that sets it (OpenMP), so only that thread can."""
    import torch

    entry = _SHARING.get(threading.get_ident())
    if entry is not None and entry[0].done():
        torch.set_num_threads(entry[1])
        _SHARING.pop(threading.get_ident(), None)


@contextmanager
def torch_on_one_core():
    """torch's intra-op threads set to one meanwhile (the job runs torch on this thread only); yields the
    count before, which comes back at the end."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield before
    finally:
        torch.set_num_threads(before)


class LockedProgress:
    """``progress`` callable safe to call from both paths (the worker's pipe is not)."""

    def __init__(self, notify):
        self._notify = notify
        self._lock = threading.Lock()

    def __call__(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            self._notify(stage, done, total)
