"""The report as it comes (issue 39): each section the spine finishes, published as a partial report.

``run_comparison(..., on_section=f)`` calls ``f(name, report)`` once per finished section, in this
order: ``files`` (what each file holds), ``level_graphs`` (the graphs ORT runs at each level, their
diffs, blockers and the decisions), then ``accuracy:<artifact>`` per artifact (fp32 first) and
``agreement``, ``latency``, ``layers`` (the per-tensor table) and ``advice``; a depth or an option that
leaves a section out skips it. ``report`` is a ``Report`` with ``partial: true``, ``sections_done`` and
every section finished so far; it holds no figure that a later section changes: the timings, the
cost, each level's ``evaluate_seconds``, the lints and the verdict come with the finished report only
(``partial: false``, every section in ``sections_done``). The job runner writes each one atomically to
the job's folder (``jobs/runner.py``), where ``GET /v1/comparisons/{id}`` serves it while the job runs.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from service.schemas.report import Report

__all__ = ["Sections", "OnSection", "FILES", "LEVEL_GRAPHS", "ACCURACY", "AGREEMENT", "LATENCY", "LAYERS", "ADVICE",
           "DECIDE"]

log = logging.getLogger(__name__)

OnSection = Callable[[str, Report], None]
FILES, LEVEL_GRAPHS, AGREEMENT, LATENCY = "files", "level_graphs", "agreement", "latency"
LAYERS, ADVICE, DECIDE = "layers", "advice", "decide"
ACCURACY = "accuracy"  # one section per artifact: "accuracy:<artifact>"


class Sections:
    """What the finished sections hold (``Report`` fields), and the partial report made from them."""

    def __init__(self, on_section: OnSection | None):
        self._on = on_section
        self.fields: dict[str, Any] = {}
        self.done: list[str] = []

    def publish(self, name: str, **fields: Any) -> None:
        self.fields.update(fields)
        self.done.append(name)
        if self._on is None:
            return
        try:
            self._on(name, Report(**self.fields, partial=True, sections_done=list(self.done)))
        except Exception:  # noqa: BLE001 - the report as it comes is a courtesy; the job goes on without it
            log.warning("partial report after %s could not be made or stored", name, exc_info=True)

    @property
    def listening(self) -> bool:
        """Someone reads the report as it comes (a job runner): else sections need not be made early."""
        return self._on is not None

    def final(self, **fields: Any) -> Report:
        self.done.append(DECIDE)
        return Report(**{**self.fields, **fields}, partial=False, sections_done=list(self.done))
