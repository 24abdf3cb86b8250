"""What a job did not measure, and the option that would (issue 39): ``Report.not_measured``.

A job pays for what is asked: its depth, the levels whose latency is timed and the switches of its
stages decide what runs. The report says what was left out in the same words the options use, so a
figure that is absent reads as not asked for, never as zero or as missing data.
"""

from __future__ import annotations

from service.schemas.options import LEVELS, ComparisonOptions, layers_by_level, measures_accuracy, timed_levels
from service.schemas.report import NotMeasured

__all__ = ["not_measured"]


def not_measured(options: ComparisonOptions) -> list[NotMeasured]:
    if not measures_accuracy(options):
        return [NotMeasured(what="accuracy at every level (numerics, agreement), latency, the per-tensor table "
                                 "and advice: depth 'structure' runs no evaluation sample",
                            option="depth: 'standard' (or 'full')")]
    out = []
    levels = [lv for lv in LEVELS if lv in options.levels]
    untimed = [lv for lv in levels if lv not in timed_levels(options)]
    if not options.latency.enabled:
        out.append(NotMeasured(what="latency at every level (options.latency.enabled is false)",
                               option="latency: {enabled: true}"))
    elif untimed:
        out.append(NotMeasured(what=f"latency at {', '.join(untimed)} (timed: {', '.join(timed_levels(options)) or 'none'})",
                               option=f"latency_levels: {levels} (or depth: 'full')"))
    if not options.layers.enabled:
        out.append(NotMeasured(what="the per-tensor table", option="layers: {enabled: true}"))
    elif not layers_by_level(options) and len(levels) > 1:
        out.append(NotMeasured(what="per-tensor error at every level (the table is at disable_all only)",
                               option="layers: {by_level: true} (or depth: 'full')"))
    if not options.advice.enabled:
        out.append(NotMeasured(what="advice (the changes the blockers point to, re-run and measured)",
                               option="advice: {enabled: true}"))
    return out
