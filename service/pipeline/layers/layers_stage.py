"""The layers stage: per-tensor error of each quantized file against fp32 (the ``layers`` table), then
exclude-and-retry when asked.

A failure here never fails the comparison: the table is extra evidence, so it comes back with
the reason in ``notes`` and no rows.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from service.pipeline.context import StageContext
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.output_shapes import output_positions
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.layers.layers import LayersBudget, layers_from_files
from service.pipeline.layers.layers_retry import RetryInputs, requantizer, retry_without_origins
from service.pipeline.quantize.side_by_side import side_by_side
from service.pipeline.quantize.stage import Quantized
from service.schemas.layers import LayersReport
from service.schemas.options import ComparisonOptions, layers_by_level, measures_accuracy, resolved_ort_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Layered:
    report: LayersReport | None  # None: the table is off, or no quantized file got this far
    seconds: float  # the table's own time (0 without a table)
    wall: float  # the stage's wall time, ``beside`` included


def layers_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, quantized: Quantized,
                 inspected: Inspected, ctx: StageContext, *, beside: Callable[[], None] | None = None) -> Layered:
    """The per-tensor table, after the levels stage wrote the optimized graphs (its progress is part of
    ``evaluate``). ``beside``: work that times nothing (advice's re-quantizations), run on a second
    thread while the table is computed; this thread helps with it once the table is done. Depth
    "structure" runs no sample: no table."""
    source = prepared.source
    if not measures_accuracy(options):
        return Layered(report=None, seconds=0.0, wall=0.0)

    def table() -> tuple[LayersReport | None, float]:
        t0 = time.perf_counter()
        report = layers_for_comparison(
            options=options, paths=inspected.paths, eval_feeds=prepared.samples.evaluation,
            tools={n: a.tool for n, a in inspected.artifacts.items() if a.tool is not None},
            out_dir=ctx.folders.scratch, source=source, shapes=prepared.shapes,
            calibration=prepared.samples.calibration, input_names=[s.name for s in source.specs],
            ort_input=quantized.ort_input or fp32.file.path, ort_settings=resolved_ort_settings(options),
            fp32_model=fp32.file.model,
            optimized_paths={a: {lv: ctx.folders.artifacts / f"{a}.{lv}.onnx" for lv in options.levels}
                             for a in inspected.paths},
            data_dependent=fp32.after_selection.moving, more_feeds=prepared.samples.more_evaluation,
            cores=ctx.cores,
        )
        return report, (round(time.perf_counter() - t0, 4) if report is not None else 0.0)

    def table_then_beside() -> tuple[LayersReport | None, float]:
        made = table()
        beside()  # whatever the other thread has not taken yet
        return made

    t0 = time.perf_counter()
    if beside is None:
        report, seconds = table()
    else:
        (report, seconds), _ = side_by_side(table_then_beside, beside, parallel=True)
    return Layered(report=report, seconds=seconds, wall=time.perf_counter() - t0)


def layers_for_comparison(*, options, paths: dict[str, Path], eval_feeds, tools: dict, out_dir: Path,
                          source=None, shapes=None, calibration=None, input_names=None, ort_input: Path | None = None,
                          ort_settings: dict | None = None, fp32_model=None,
                          optimized_paths: dict[str, dict[str, Path]] | None = None,
                          data_dependent: dict[str, str] | None = None, more_feeds=None,
                          cores: int = 1) -> LayersReport | None:
    """``paths``: fp32 + every quantized artifact whose path is ok. ``tools``: artifact -> ToolInfo
    (its ``calibration`` sentence explains differing steps). ``more_feeds``: ``Samples.more_evaluation``,
    the held-out feeds past ``eval_feeds`` the table runs when its intervals ask for more samples.
    The rest is only read by the retry."""
    opts = options.layers
    quantized = {a: p for a, p in paths.items() if a != "fp32"}
    if not opts.enabled or not quantized or "fp32" not in paths:
        return None
    t0 = time.perf_counter()
    try:
        report = layers_from_files(
            fp32_path=paths["fp32"], artifact_paths=quantized, eval_feeds=eval_feeds,
            budget=LayersBudget(max_tensors=opts.max_tensors, min_samples=opts.min_samples,
                                max_samples=opts.max_samples, max_seconds=opts.max_seconds),
            calibration={a: getattr(t, "calibration", None) or "" for a, t in tools.items()},
            optimized_paths=optimized_paths if layers_by_level(options) else None, data_dependent=data_dependent,
            more_feeds=more_feeds, seed=options.seed, cores=cores,
        )
    except Exception as e:  # noqa: BLE001 - extra evidence; the comparison stands without it
        log.warning("layers failed: %r", e, exc_info=True)
        return LayersReport(samples=0, method="not measured", notes=[f"failed: {type(e).__name__}: {str(e)[:300]}"],
                            seconds=round(time.perf_counter() - t0, 4))
    if opts.retry_k <= 0:
        return report
    run = requantizer(source=source, shapes=shapes, calibration=calibration, input_names=input_names,
                      ort_input=ort_input, ort_settings=ort_settings, per_channel=options.pt2e.per_channel,
                      fp32_model=fp32_model)
    retry_dir = out_dir / "retry"
    retry_dir.mkdir(parents=True, exist_ok=True)
    retry = retry_without_origins(report, RetryInputs(
        fp32_path=paths["fp32"], artifact_paths=quantized, eval_feeds=eval_feeds, requantize=run,
        out_dir=retry_dir, intra_op_threads=options.latency.intra_op_threads, latency_runs=options.latency.runs,
        data_dependent=frozenset(output_positions(fp32_model, data_dependent or {})) if fp32_model is not None
        else frozenset(),
    ), k=opts.retry_k, max_seconds=opts.retry_seconds)
    return report.model_copy(update={"retry": retry})
