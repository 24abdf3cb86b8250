"""How the extras' budget was spent, step by step, for the report (``Report.extras``)."""

from __future__ import annotations

from service.pipeline.extras_budget import REACH_FURTHER, ExtrasBudget
from service.pipeline.advice.advice import AdvicePlan
from service.pipeline.advice.stage import Advised
from service.schemas.layers import LayersReport
from service.schemas.report import ExtrasSpent, ExtrasStep

__all__ = ["extras_spent"]


def extras_spent(budget: ExtrasBudget, options, layers: LayersReport | None, advised: Advised,
                 plan: AdvicePlan | None) -> ExtrasSpent | None:
    """The four steps in the order the budget pays for them (pipeline/extras_budget.py); None at depth
    "structure" (no extras) or with both extras off."""
    if options.depth == "structure" or not (options.advice.enabled or options.layers.enabled):
        return None
    measured = [e for e in plan.timed if e.measured is not None] if plan is not None else []
    steps = [_best_candidate(options, plan, measured)]
    if options.layers.enabled:
        steps.append(_table_minimum(options, layers))
    if options.advice.enabled and plan is not None:
        further = len(measured) - 1 if measured else 0
        left = len(advised.not_run)
        steps.append(ExtrasStep(step="further candidates", reached=left == 0, detail=(
            f"{further} more measured" + (f"; {left} not re-run ({REACH_FURTHER})" if left else ""))))
    if options.layers.enabled and layers is not None and layers.sampling is not None:
        sampling = layers.sampling
        more = max(0, layers.samples - options.layers.min_samples)
        budget_stop = "extras' budget" in sampling.stopped
        steps.append(ExtrasStep(step="further table samples", reached=not budget_stop, detail=(
            f"{more} more samples ({layers.samples} in all); stopped: {sampling.stopped}"
            + (f"; {sampling.ranking}" if sampling.ranking else ""))))
    return ExtrasSpent(budget_seconds=None if budget.seconds is None else round(budget.seconds, 3), how=budget.how,
                       spent_seconds=round(budget.spent(), 3), steps=steps)


def _best_candidate(options, plan: AdvicePlan | None, measured: list) -> ExtrasStep:
    step = "advice's best candidate"
    if not options.advice.enabled:
        return ExtrasStep(step=step, reached=False, detail="advice is off (options.advice.enabled)")
    if plan is None:
        return ExtrasStep(step=step, reached=True, detail="no candidate: the blockers point to no change to measure")
    if not measured:
        return ExtrasStep(step=step, reached=True, detail="no candidate could be timed: each failed or changed "
                                                          "nothing ORT runs (the reasons are in advice_refuted)")
    first = measured[0]
    return ExtrasStep(step=step, reached=True, detail=(
        f"{first.artifact} {first.change} measured in {first.measured.seconds:.1f} s "
        f"({'adopted' if first.adopted else 'refuted'})"))


def _table_minimum(options, layers: LayersReport | None) -> ExtrasStep:
    step = f"per-tensor table at {options.layers.min_samples} samples"
    if layers is None:
        return ExtrasStep(step=step, reached=False, detail="no quantized file to compare")
    if layers.samples == 0:
        return ExtrasStep(step=step, reached=False, detail="; ".join(layers.notes) or "not run")
    shared = layers.sampling.reused_samples if layers.sampling is not None else 0
    return ExtrasStep(step=step, reached=layers.samples >= min(options.layers.min_samples, options.layers.max_samples),
                      detail=f"{layers.samples} samples in {layers.seconds:.1f} s" + (
                          f"; the first {shared} shared with the accuracy runs at disable_all (run once, their time "
                          "charged to this budget)" if shared else ""))
