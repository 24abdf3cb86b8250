"""This machine's levels result as a platform's levels read it (``platform_levels(..., host, ...)``): the levels
run and each file's facts, without running this machine's levels."""

from __future__ import annotations

from pathlib import Path

from service.pipeline.runtime.levels import LevelsResult, file_facts_from_graph
from service.pipeline.vocabulary import graph_from_path


def host_levels(paths: dict[str, Path], levels: list[str]) -> LevelsResult:
    return LevelsResult(optimized={}, agreement=[], timings={}, levels=levels,
                        files={n: file_facts_from_graph(graph_from_path(p)) for n, p in paths.items()})
