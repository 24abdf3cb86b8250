"""The platforms stage: after this machine's levels, each emulated platform the options name gets its
own level graphs, blockers, decisions and accuracy, and the rows that set it beside this machine."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from service.pipeline.platforms.advice import advice_for_platform
from service.pipeline.platforms.emulated_levels import platform_levels
from service.pipeline.platforms.side_by_side import side_by_side_rows
from service.pipeline.ort.targets import host_platform, platform_from_name
from service.pipeline.runtime.levels import LevelsResult
from service.pipeline.verdict.decisions import decisions_table
from service.schemas.options import ComparisonOptions
from service.schemas.platforms import PlatformReport

__all__ = ["platforms_stage"]


def platforms_stage(options: ComparisonOptions, levels: LevelsResult, *, artifact_paths: dict[str, Path],
                    eval_feeds: list[dict[str, np.ndarray]], out_dir: Path, inventories: dict,
                    data_dependent: dict[int, str] | None = None,
                    memory_mb: int = 0, timings: dict[str, float] | None = None) -> dict[str, PlatformReport]:
    """``{name: PlatformReport}`` for every emulated platform in ``options.platforms`` (this machine's
    own results stay in ``artifacts``); an unavailable runtime is a report with status ``unavailable``."""
    host = host_platform()
    out: dict[str, PlatformReport] = {}
    t0 = time.perf_counter()
    for name in options.platforms or []:
        platform = platform_from_name(name)
        if not platform.emulated:
            continue
        paths = {n: p for n, p in artifact_paths.items() if n in levels.optimized}
        report = platform_levels(platform, artifact_paths=paths, eval_feeds=eval_feeds, out_dir=out_dir,
                                 options=options, levels=levels.levels, files=levels.files,
                                 # always stored: a download cannot make an emulated graph again
                                 # (runtime/level_graphs.py regenerates with this machine's ORT)
                                 data_dependent=data_dependent, keep_level_graphs=True,
                                 memory_mb=memory_mb)
        if report.status == "ok":
            report = report.model_copy(update={
                "decisions": decisions_table(names=list(report.optimized), files=levels.files,
                                             optimized=report.optimized, inventories=inventories,
                                             levels=levels.levels, options=options),
                "side_by_side": side_by_side_rows(levels.optimized, host, report)})
            report = report.model_copy(update={"advice": advice_for_platform(report)})
        out[name] = report
    if timings is not None and out:
        timings["platforms"] = round(time.perf_counter() - t0, 4)
    return out
