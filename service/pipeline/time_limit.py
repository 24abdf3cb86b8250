"""A wall-clock limit on one path, so that a slow PT2E path fails alone instead of taking the job.

Why: PT2E and ``torch.onnx.export`` take time in proportion to the torch graph's ops (40-56 ms per
op here, twice that beside another job; docs/history/notes.md, ninth and fifteenth passes), and the
``max_graph_ops`` cap is a count, not a clock: madmom's BLSTM, 7945 ops, just under the cap, took
805 s. Past the job's time limit the worker is killed, and the ORT paths' results, done long before,
go with it. With this limit the PT2E path fails with ``path_time_limit`` and the job goes on.

How: ``setitimer(ITIMER_REAL)`` and a SIGALRM handler that raises ``TimeLimitReached``. The PT2E
path runs on the job's main thread (quantize/side_by_side.py: torch.export is not thread-safe with
itself), which is where Python delivers signals, between two bytecodes: a long native call (one ORT
run, one ``torch.histc``) finishes first. ``TimeLimitReached`` is a ``BaseException``, as
``KeyboardInterrupt`` is, so that the toolchains' ``except Exception`` blocks (torch's fallbacks,
onnxscript's rewriter) cannot swallow it; ``finally`` blocks and context managers still run, which
is what restores torch's global state. Off the main thread (no signal can reach it) the limit is not
enforced, and the log says so.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from contextlib import contextmanager

log = logging.getLogger(__name__)

# Limits that fired in this process. A toolchain stopped mid-way may keep a cache or a patch half-made
# (the ``finally`` blocks run, but not every toolchain has one where it matters): the service's
# worker retires after a job in which this moved (jobs/worker.py), so the next job starts clean.
stops = 0
# An alarm that lands inside an import waits this long, again and again, until the import is done.
_IMPORT_GRACE_S = 0.05
# What the path is doing now, innermost last (``step``): the handler names the innermost.
_steps: list[str] = []


class TimeLimitReached(BaseException):
    """The path ran past ``seconds``; ``step`` is what it was doing then (the innermost ``step``)."""

    def __init__(self, seconds: float, step: str | None = None):
        super().__init__(f"ran past its time limit of {seconds:g} s")
        self.seconds = seconds
        self.step = step


@contextmanager
def time_limited(seconds: float | None):
    """Raise ``TimeLimitReached`` in this thread once ``seconds`` of wall time have passed. ``None``:
    no limit. An outer timer (none in a worker; pytest-timeout's in the suite) still fires when it is
    due, and goes on afterwards with the time it had left."""
    if seconds is None:
        yield
        return
    if threading.current_thread() is not threading.main_thread():
        log.warning("the %g s path time limit is not enforced off the main thread", seconds)
        yield
        return
    started = time.monotonic()
    previous = signal.getsignal(signal.SIGALRM)
    outer_left, outer_interval = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, say
    outer_fired = []

    def on_alarm(signum, frame):
        if outer_left and time.monotonic() - started < seconds:  # the outer timer's alarm: its handler's
            outer_fired.append(True)
            if callable(previous):
                previous(signum, frame)
            signal.setitimer(signal.ITIMER_REAL, max(seconds - (time.monotonic() - started), 1e-3))
            return
        if _importing(frame):  # stopped mid-import, a module stays half-made for the process's life
            signal.setitimer(signal.ITIMER_REAL, _IMPORT_GRACE_S)
            return
        global stops
        stops += 1
        raise TimeLimitReached(seconds, _steps[-1] if _steps else None)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_left) if outer_left else seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        elapsed = time.monotonic() - started
        if outer_left and not outer_fired:  # the outer timer goes on with what it had left
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - elapsed, 1e-3), outer_interval)
        log.debug("path under a %g s limit took %.1f s", seconds, elapsed)


def _importing(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False



@contextmanager
def step(name: str):
    """Mark what the code inside does, for the message of a limit that lands there."""
    _steps.append(name)
    try:
        yield
    finally:
        _steps.pop()
