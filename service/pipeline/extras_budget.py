"""One budget for the extras: advice's re-runs and the per-tensor table share it (issue 47).

The essentials (the files, the level graphs, accuracy at every level, latency at ``latency_levels``) come
first, whatever they cost. The extras then get ``options.extras.share`` of the essentials' seconds (or
``options.extras.seconds``), spent in this order:

1. advice's candidate with the highest expected gain, re-run and measured: always, whatever the budget,
   when advice is on and a candidate exists (it is what a user acts on);
2. the per-tensor table at its minimum sample count (``options.layers.min_samples``), with intervals,
   when anything is left;
3. further candidates, each while its estimated cost fits;
4. further table samples toward the interval target, while what is left after the candidates still to
   come (``reserve``) pays for them; the table also stops once its ranking is settled.

Depth "full" has no budget: every candidate, and the table until its intervals are narrow or its own cap
(``options.layers.max_seconds``). The budget is wall-clock time from the moment the extras start, so work
that runs side by side on two cores counts once.

The table's minimum samples are the one part run earlier: their runs at disable_all are the accuracy runs
at disable_all (layers.TensorTable), so they run once, inside the levels stage, whenever the budget is
not set to zero. Their time is the table's, not the essentials': it is taken out of the essentials'
seconds the share is of, and charged to the budget (``charge``) before the extras start.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

__all__ = ["ExtrasBudget", "extras_budget", "may_share_table_runs", "REACH_FURTHER"]

# What a user sets to reach what the budget left out (said wherever something was left out).
REACH_FURTHER = "set options.extras.seconds (a budget in seconds for advice and the per-tensor table), or depth 'full'"


class ExtrasBudget:
    """The seconds the extras may take, and how they were set. ``seconds`` None: no budget (depth full)."""

    def __init__(self, seconds: float | None, how: str):
        self.seconds = None if seconds is None else max(0.0, float(seconds))
        self.how = how
        self._t0: float | None = None
        self._charged = 0.0  # extras' work done before the extras started (the table's shared samples)
        self._lock = threading.Lock()
        self._reserve: Callable[[], float] = lambda: 0.0

    @property
    def bounded(self) -> bool:
        return self.seconds is not None

    def start(self) -> None:
        """The extras begin: the clock starts once, at the first call."""
        with self._lock:
            if self._t0 is None:
                self._t0 = time.perf_counter()

    def charge(self, seconds: float) -> None:
        """Extras' work already done before the extras start (the table's minimum samples, run with the
        accuracy runs): it counts as spent."""
        self._charged += max(0.0, seconds)

    def spent(self) -> float:
        return self._charged + (0.0 if self._t0 is None else time.perf_counter() - self._t0)

    def left(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.spent()

    def hold_for(self, reserve: Callable[[], float]) -> None:
        """What later steps of a higher priority (advice's further candidates) still need, in seconds: the
        table's further samples leave it to them."""
        self._reserve = reserve

    def fits(self, seconds: float) -> bool:
        """Whether work of ``seconds`` fits what is left (always, without a budget)."""
        return self.left() >= seconds

    def table_may_continue(self, seconds: float) -> bool:
        """Whether ``seconds`` more of the table's samples fit once the further candidates are paid for."""
        return self.seconds is None or self.left() - self._reserve() >= seconds


def may_share_table_runs(options) -> bool:
    """Whether the table's minimum samples may run with the accuracy runs, before the budget is known:
    not when the budget is set to nothing (then the best candidate alone is measured, and no table)."""
    extras = options.extras
    return options.depth == "full" or (extras.seconds if extras.seconds is not None else extras.share) > 0


def extras_budget(options, essentials_seconds: float) -> ExtrasBudget:
    """The extras' budget for a job whose essentials took ``essentials_seconds`` (the table's shared samples
    left out: they are charged to the budget)."""
    if options.depth == "full":
        return ExtrasBudget(None, "depth 'full': no budget, every candidate and the table to its interval target "
                                  "or options.layers.max_seconds")
    extras = options.extras
    if extras.seconds is not None:
        return ExtrasBudget(extras.seconds, f"options.extras.seconds = {extras.seconds:g} s")
    return ExtrasBudget(extras.share * essentials_seconds,
                        f"options.extras.share {extras.share:g} x the essentials' {essentials_seconds:.0f} s")
