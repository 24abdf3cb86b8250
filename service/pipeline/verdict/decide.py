"""The decide stage: what the levels results mean, for a person and for CI.

Reads what the earlier stages measured (the levels results, each file's inventory) and computes
nothing about ORT itself: the decisions table, the lints, where this machine differs from the
chapter, and the gate verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.pipeline.environment import cpu_info
from service.schemas.options import ComparisonOptions
from service.pipeline.runtime.levels import LevelsResult
from service.pipeline.verdict.decisions import decisions_table
from service.pipeline.verdict.lints import lints_for, ort_optimized_upload_lints, sentinel_range_lints
from service.pipeline.verdict.platform_notes import platform_notes
from service.pipeline.verdict.reference_noise import (
    nonfinite_reference_lints, saturated_reference_lints, unstable_reference_lints,
)
from service.schemas.levels import DecisionRow, Lint, PlatformNote
from service.schemas.report import CpuInfo, QuantizationInventory


@dataclass(frozen=True)
class Decided:
    decisions: list[DecisionRow]
    lints: list[Lint]
    platform: list[PlatformNote]


def decided_from_levels(levels: LevelsResult, *, inventories: dict[str, QuantizationInventory | None],
                        options: ComparisonOptions, batchnorm_in_source: int = 0,
                        cpu: CpuInfo | None = None, advice_measured: list | None = None) -> Decided:
    """``advice_measured``: the advice entries (proposed and refuted), whose re-runs the platform
    notes quote (e.g. the coverage this model would have where int8 is allowed)."""
    cpu = cpu or cpu_info()
    names = list(levels.optimized)
    return Decided(
        decisions=decisions_table(names=names, files=levels.files, optimized=levels.optimized,
                                  inventories=inventories, levels=levels.levels, options=options,
                                  batchnorm_in_source=batchnorm_in_source),
        lints=ort_optimized_upload_lints(levels.files.get("fp32"))
        + lints_for(names=names, files=levels.files, optimized=levels.optimized, options=options, cpu=cpu)
        + sentinel_range_lints(inventories)
        + unstable_reference_lints(levels.optimized.get("fp32", {}), levels.reference_outputs)
        + nonfinite_reference_lints(levels.optimized.get("fp32", {}), levels.reference_outputs)
        + saturated_reference_lints(levels.optimized.get("fp32", {}), levels.reference_outputs),
        platform=platform_notes(levels.optimized, cpu, advice_measured),
    )
