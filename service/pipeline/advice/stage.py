"""The advice stage: the changes the blockers point to, re-run for real and measured.

Three steps, in the extras' order (pipeline/extras_budget.py). ``advice_candidates`` plans them from the
levels stage's blockers, running nothing; ``best_candidate_measured`` makes and times the first at once;
the plan's ``work`` (each further candidate's re-quantized file, SQNR and int8 coverage: nothing timed)
may then run beside the per-tensor table on a second core. ``advice_stage`` makes what is left and times
each candidate alone, while the scratch folder (the pre-processed input, the calibration ranges) still
exists.
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
from service.pipeline.extras_budget import ExtrasBudget
from service.pipeline.advice.advice import AdviceContext, AdvicePlan, advice_plan_for_job, time_ready, timed_advice
from service.pipeline.advice.recipe import RecipeBase, recipe_for
from service.schemas.advice import AdviceEntry
from service.schemas.options import ComparisonOptions, measures_accuracy, resolved_ort_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Advised:
    proposed: list[AdviceEntry] = field(default_factory=list)
    refuted: list[AdviceEntry] = field(default_factory=list)
    not_run: list[AdviceEntry] = field(default_factory=list)  # left out by the budget, each with the reason
    first_seconds: float = 0.0  # the best candidate, made and timed before the table (its wall time)
    made_seconds: float = 0.0  # making the others (``AdvicePlan.work``), on whichever thread ran it
    timed_seconds: float = 0.0  # timing them, alone


def advice_candidates(options: ComparisonOptions, prepared: Prepared, quantized: Quantized, inspected: Inspected,
                      levels: LevelsResult, ctx: StageContext, *, budget: ExtrasBudget) -> AdvicePlan | None:
    """The plan of what advice will re-run (None: advice is off, depth "structure", or nothing to measure).
    Runs nothing. ``budget``: the extras' budget it shares with the per-tensor table."""
    if not options.advice.enabled or not measures_accuracy(options):
        return None
    ctx.notify("advice", 0, 1)
    lat = options.latency
    plan = advice_plan_for_job(levels.optimized, AdviceContext(
        artifact_paths=dict(inspected.paths), ort_input=quantized.ort_input, ort_settings=resolved_ort_settings(options),
        calibration=list(prepared.samples.calibration), evaluation=list(prepared.samples.evaluation),
        input_names=[s.name for s in prepared.source.specs],
        calibration_cache=ctx.folders.scratch / "ort_calibration_ranges.json", level=options.advice.level,
        runs=max(lat.runs, 20), warmup=max(lat.warmup, 2), threads=lat.intra_op_threads, budget=budget,
        budget_how=budget.how, cores=ctx.cores, quantize_seconds={n: s for n, (_, s) in quantized.outcomes.items()},
        reference=levels.reference_outputs, session_config=dict(options.ort_session)))
    if plan is not None:
        plan.recipe_base = recipe_base(options, prepared, quantized)
    return plan


def recipe_base(options: ComparisonOptions, prepared: Prepared, quantized: Quantized) -> RecipeBase:
    """What the recipes of this job share: its options, how the ORT paths' input was made, its samples."""
    tools = {n: o.value.name for n, (o, _) in quantized.outcomes.items() if o.ok and getattr(o.value, "name", None)}
    return RecipeBase(options=options, ort_steps=list(quantized.ort_steps), level=options.advice.level,
                      input_names=[s.name for s in prepared.source.specs],
                      calibration_count=len(prepared.samples.calibration), tools=tools)


def with_recipes(entries: list[AdviceEntry], base: RecipeBase | None) -> list[AdviceEntry]:
    """Each entry with its recipe; an entry keeps none when making it fails (logged: advice is an extra)."""
    if base is None:
        return entries
    out = []
    for e in entries:
        try:
            out.append(e.model_copy(update={"recipe": recipe_for(e.artifact, e.change, base)}))
        except Exception:  # noqa: BLE001
            log.warning("no recipe for %s %s", e.artifact, e.change, exc_info=True)
            out.append(e)
    return out


def best_candidate_measured(plan: AdvicePlan | None) -> None:
    """The extras' first step: advice's candidate with the highest expected gain, made and timed now,
    whatever the budget (a job with a candidate measures at least one: one that fails, or that ORT rewrites
    into the very graph it had, is settled and the next one is made)."""
    if plan is None:
        return
    t0 = time.perf_counter()
    try:
        plan.work(first_only=True)
        time_ready(plan)
    except Exception:  # noqa: BLE001 - advice is an extra; a failure here must not fail the comparison
        log.warning("advice's first candidate failed", exc_info=True)
    # Its own wall time, apart from the counters of what comes later (made beside the table, or timed after)
    plan.first_seconds, plan.seconds, plan.timed_seconds = time.perf_counter() - t0, 0.0, 0.0


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
    not_run = plan.not_run
    try:
        proposed, refuted = timed_advice(plan)
    except Exception:  # noqa: BLE001 - advice is an extra; a failure here must not fail the comparison
        log.warning("advice failed; the report has none", exc_info=True)
        proposed, refuted = [], []
    proposed, refuted, not_run = (with_recipes(x, plan.recipe_base) for x in (proposed, refuted, not_run))
    return Advised(proposed=proposed, refuted=refuted, not_run=not_run, first_seconds=plan.first_seconds,
                   made_seconds=plan.seconds, timed_seconds=plan.timed_seconds)
