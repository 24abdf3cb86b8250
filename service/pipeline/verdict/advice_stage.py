"""The advice stage: the changes the blockers point to, re-run for real and measured.

Two steps. ``advice_candidates`` plans them from the levels stage's blockers, running nothing; its
``work`` (each candidate's re-quantized file, SQNR and int8 coverage: nothing timed) may run beside the
per-tensor table on a second core. ``advice_stage`` then makes what is left and times each candidate
alone, while the scratch folder (the pre-processed input, the calibration ranges) still exists.
A failure here never fails the comparison: advice is an extra.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from service.pipeline.context import StageContext
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.quantize.stage import Quantized
from service.pipeline.runtime.levels import LevelsResult
from service.pipeline.verdict.advice import AdvicePlan, advice_plan_for_job, timed_advice
from service.schemas.advice import AdviceEntry
from service.schemas.options import ComparisonOptions, resolved_ort_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Advised:
    proposed: list[AdviceEntry] = field(default_factory=list)
    refuted: list[AdviceEntry] = field(default_factory=list)
    made_seconds: float = 0.0  # making the candidates (``AdvicePlan.work``), on whichever thread ran it
    timed_seconds: float = 0.0  # timing them, alone


def advice_candidates(options: ComparisonOptions, prepared: Prepared, quantized: Quantized, inspected: Inspected,
                      levels: LevelsResult, ctx: StageContext) -> AdvicePlan | None:
    """The plan of what advice will re-run (None: advice is off, or nothing to measure). Runs nothing."""
    if not options.advice.enabled:
        return None
    ctx.notify("advice", 0, 1)
    return advice_plan_for_job(
        levels.optimized, inspected.paths, options, ort_input=quantized.ort_input,
        ort_settings=resolved_ort_settings(options), samples=prepared.samples,
        input_names=[s.name for s in prepared.source.specs],
        calibration_cache=ctx.folders.scratch / "ort_calibration_ranges.json",
        quantize_seconds={n: s for n, (_, s) in quantized.outcomes.items()}, reference=levels.reference_outputs)


def made_candidates(plan: AdvicePlan | None) -> None:
    """``plan.work``, on any thread: each call takes the next candidate not made yet."""
    if plan is None:
        return
    try:
        plan.work()
    except Exception:  # noqa: BLE001 - advice is an extra; a failure here must not fail the comparison
        log.warning("advice failed; the report has none", exc_info=True)


def advice_stage(options: ComparisonOptions, plan: AdvicePlan | None, ctx: StageContext, *,
                 made_beside: str | None = None) -> Advised:
    """What is left of the candidates made, then each timed alone against the artifact as is.
    ``made_beside``: what the candidates were made beside (said in each figure's ``how``)."""
    if plan is None:
        return Advised()
    made_candidates(plan)
    plan.beside = made_beside
    ctx.notify("advice", 0, 1)
    t0 = time.perf_counter()
    try:
        proposed, refuted = timed_advice(plan)
    except Exception:  # noqa: BLE001 - advice is an extra; a failure here must not fail the comparison
        log.warning("advice failed; the report has none", exc_info=True)
        proposed, refuted = [], []
    return Advised(proposed=proposed, refuted=refuted, made_seconds=plan.seconds,
                   timed_seconds=time.perf_counter() - t0)
