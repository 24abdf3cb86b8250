"""The levels stage (optimize + evaluate): each artifact at each ORT level, the graph ORT runs diffed
level to level, its accuracy against fp32 and its latency."""

from __future__ import annotations

from service.pipeline.context import StageContext
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.runtime.levels import LevelsInput, LevelsResult, LevelsRun, Section, SharedRuns, analyze_levels
from service.schemas.options import ComparisonOptions, layers_by_level


def levels_input(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected) -> LevelsInput:
    """What the levels compare, from the earlier stages' results: the files that go on, the evaluation
    samples, and fp32's outputs whose shape follows the values (the platforms stage compares the same)."""
    return LevelsInput(artifact_paths=inspected.paths, eval_feeds=prepared.samples.evaluation, options=options,
                       data_dependent=fp32.data_dependent_outputs())


def levels_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected,
                 ctx: StageContext, *, on_section: Section | None = None,
                 disable_all_runs: SharedRuns | None = None) -> LevelsResult:
    """``inspected.loaded`` is handed over: each parsed graph is dropped once its levels ran, so a
    real-size model is not held in memory twice. Its own timings split optimize, evaluate (the untimed
    accuracy runs, on ``ctx.cores``) and latency. ``on_section``: the level graphs, each artifact's
    accuracy, the agreement and the latency as each is done (pipeline/sections.py). ``disable_all_runs``:
    the per-tensor table's first samples, whose runs are the accuracy runs at disable_all (levels.py)."""
    request = ctx.request
    run = LevelsRun(out_dir=ctx.folders.artifacts, cores=ctx.cores, concurrent_jobs=request.concurrent_jobs,
                    # the per-tensor table by level reads the level graphs from the artifacts folder
                    keep_level_graphs=request.keep_level_graphs or layers_by_level(options),
                    progress=ctx.notify, on_section=on_section, disable_all_runs=disable_all_runs)
    return analyze_levels(levels_input(options, prepared, fp32, inspected), run, loaded=inspected.loaded)
