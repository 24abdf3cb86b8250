"""The levels stage (optimize + evaluate): each artifact at each ORT level, the graph ORT runs diffed
level to level, its accuracy against fp32 and its latency."""

from __future__ import annotations

from service.pipeline.context import StageContext
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.runtime.levels import LevelsResult, analyze_levels
from service.schemas.options import ComparisonOptions


def levels_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected,
                 ctx: StageContext) -> LevelsResult:
    """``inspected.loaded`` is handed over: each parsed graph is dropped once its levels ran, so a
    real-size model is not held in memory twice. Its own timings split optimize and evaluate."""
    request = ctx.request
    return analyze_levels(artifact_paths=inspected.paths, eval_feeds=prepared.samples.evaluation,
                          out_dir=ctx.folders.artifacts, options=options, progress=ctx.notify,
                          loaded=inspected.loaded, concurrent_jobs=request.concurrent_jobs,
                          keep_level_graphs=request.keep_level_graphs, data_dependent=fp32.data_dependent_outputs())
