"""The layers stage: per-tensor error of each quantized file against fp32 (the ``layers`` table), then
exclude-and-retry when asked.

A failure here never fails the comparison: the table is extra evidence, so it comes back with
the reason in ``notes`` and no rows.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from service.pipeline.context import StageContext
from service.pipeline.extras_budget import REACH_FURTHER, ExtrasBudget
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.layers.layers import LayersBudget, TensorTable
from service.pipeline.runtime.levels import SharedRuns
from service.pipeline.runtime.numerics import concat_runs
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


def table_for_job(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected,
                  ctx: StageContext) -> TensorTable | None:
    """The per-tensor table, set up (the files aligned to fp32, nothing run) before the levels stage, so
    that its first samples can be the accuracy runs at disable_all (``shared_first_samples``). None when the
    job makes no table, or makes it by level (it reads the graphs the levels stage writes: set up after)."""
    if not measures_accuracy(options) or not options.layers.enabled or layers_by_level(options):
        return None
    try:
        return _table(options, prepared, fp32, inspected, ctx)
    except Exception:  # noqa: BLE001 - extra evidence: set up again (and fail with the reason) in the stage
        log.warning("the per-tensor table could not be set up before the levels", exc_info=True)
        return None


def shared_first_samples(table: TensorTable | None, prepared: Prepared) -> SharedRuns | None:
    """For the levels stage: the table's first samples (the evaluation samples) run once, for both, each
    file's graph outputs handed back as its accuracy at disable_all (layers.TensorTable, issue 47)."""
    if table is None:
        return None

    def runs() -> dict[str, tuple[list[str], list]]:
        kept = table.first_outputs(prepared.samples.evaluation)
        return {name: (table.outputs[name], concat_runs([[d[o] for o in table.outputs[name]] for d in per_sample]))
                for name, per_sample in kept.items()}

    return runs


@dataclass(frozen=True)
class TableTurn:
    """What the spine hands the table for its turn among the extras (pipeline/extras_budget.py)."""

    # The table set up before the levels stage (``table_for_job``), its first samples perhaps run there.
    table: TensorTable | None = None
    # The budget it shares with advice: the minimum samples when anything is left, more only while the
    # budget pays for them after the candidates still to come.
    extras: ExtrasBudget | None = None
    # Work that times nothing (advice's re-quantizations), run on a second thread while the table is
    # computed; the table's thread helps with it once the table is done.
    beside: Callable[[], None] | None = None


def layers_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, quantized: Quantized,
                 inspected: Inspected, ctx: StageContext, turn: TableTurn = TableTurn()) -> Layered:
    """The per-tensor table, after the levels stage wrote the optimized graphs, in its ``turn``. Depth
    "structure" runs no sample: no table."""
    table, extras, beside = turn.table, turn.extras, turn.beside
    if not measures_accuracy(options) or not options.layers.enabled:
        return Layered(report=None, seconds=0.0, wall=0.0)
    t0 = time.perf_counter()
    if table is not None and table.samples and not table.reused:
        table = None  # its first samples failed half way: a table of its own, from the start
    if extras is not None and extras.bounded and extras.left() <= 0 and not (table and table.samples):
        if beside is not None:
            beside()
        return Layered(report=LayersReport(samples=0, method="not measured", notes=[
            f"not run: the extras' budget ({extras.how}) was spent before the table's turn (advice's best "
            f"candidate comes first); {REACH_FURTHER}"]), seconds=0.0, wall=time.perf_counter() - t0)

    def made() -> tuple[LayersReport | None, float]:
        t1 = time.perf_counter()
        report = _completed(table, options, prepared, fp32, inspected, ctx, extras)
        if report is not None and options.layers.retry_k > 0:
            report = _with_retry(report, options, prepared, fp32, quantized, inspected, ctx)
        return report, (round(time.perf_counter() - t1, 4) if report is not None else 0.0)

    def made_then_beside() -> tuple[LayersReport | None, float]:
        out = made()
        beside()  # whatever the other thread has not taken yet
        return out

    if beside is None:
        report, seconds = made()
    else:
        (report, seconds), _ = side_by_side(made_then_beside, beside, parallel=True)
    return Layered(report=report, seconds=seconds, wall=time.perf_counter() - t0)


def _completed(table: TensorTable | None, options: ComparisonOptions, prepared: Prepared, fp32: Fp32,
               inspected: Inspected, ctx: StageContext, extras: ExtrasBudget | None) -> LayersReport | None:
    """The table run to where its budget and its answer say (None: no quantized file). A failure comes
    back as a report with the reason and no rows: the comparison stands without it."""
    t0 = time.perf_counter()
    try:
        table = table or _table(options, prepared, fp32, inspected, ctx)
        if table is None:
            return None
        if extras is not None and extras.bounded:
            table.spend_within(extras.table_may_continue, REACH_FURTHER)
        return table.completed(prepared.samples.evaluation, prepared.samples.more_evaluation)
    except Exception as e:  # noqa: BLE001 - extra evidence; the comparison stands without it
        log.warning("layers failed: %r", e, exc_info=True)
        return LayersReport(samples=0, method="not measured", notes=[f"failed: {type(e).__name__}: {str(e)[:300]}"],
                            seconds=round(time.perf_counter() - t0, 4))


def _table(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected,
           ctx: StageContext) -> TensorTable | None:
    """The table over fp32 and every quantized file whose path is ok, set up (None: no quantized file).
    Each artifact's ``tool.calibration`` sentence explains differing steps."""
    paths = inspected.paths
    quantized = {a: p for a, p in paths.items() if a != "fp32"}
    if not quantized or "fp32" not in paths:
        return None
    tools = {n: a.tool for n, a in inspected.artifacts.items() if a.tool is not None}
    opts = options.layers
    return TensorTable(
        fp32_path=paths["fp32"], artifact_paths=quantized,
        budget=LayersBudget(max_tensors=opts.max_tensors, min_samples=opts.min_samples, max_samples=opts.max_samples,
                            max_seconds=opts.max_seconds, stop_when_settled=options.depth != "full"),
        calibration={a: getattr(t, "calibration", None) or "" for a, t in tools.items()},
        optimized_paths={a: {lv: ctx.folders.artifacts / f"{a}.{lv}.onnx" for lv in options.levels}
                         for a in quantized} if layers_by_level(options) else None,
        data_dependent=fp32.after_selection.moving, seed=options.seed, cores=ctx.cores,
    )


def _with_retry(report: LayersReport, options: ComparisonOptions, prepared: Prepared, fp32: Fp32,
                quantized: Quantized, inspected: Inspected, ctx: StageContext) -> LayersReport:
    """``options.layers.retry_k``: each artifact re-quantized with its k worst origin nodes kept in float."""
    source, paths = prepared.source, inspected.paths
    run = requantizer(source=source, shapes=prepared.shapes, calibration=prepared.samples.calibration,
                      input_names=[s.name for s in source.specs], ort_input=quantized.ort_input or fp32.file.path,
                      ort_settings=resolved_ort_settings(options), per_channel=options.pt2e.per_channel,
                      fp32_model=fp32.file.model)
    retry_dir = ctx.folders.scratch / "retry"
    retry_dir.mkdir(parents=True, exist_ok=True)
    retry = retry_without_origins(report, RetryInputs(
        fp32_path=paths["fp32"], artifact_paths={a: p for a, p in paths.items() if a != "fp32"},
        eval_feeds=prepared.samples.evaluation, requantize=run, out_dir=retry_dir,
        intra_op_threads=options.latency.intra_op_threads, latency_runs=options.latency.runs,
        data_dependent=frozenset(fp32.data_dependent_outputs()), session_config=dict(options.ort_session),
    ), k=options.layers.retry_k, max_seconds=options.layers.retry_seconds)
    return report.model_copy(update={"retry": retry})
