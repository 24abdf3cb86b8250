"""One budget for the extras (issue 47): how it is set, and the table's further samples leaving what is
left to the candidates still to come."""

from __future__ import annotations

import time

from service.pipeline.extras_budget import ExtrasBudget, extras_budget
from service.schemas.options import ComparisonOptions


def test_the_default_budget_is_half_the_essentials_and_a_user_can_set_it():
    budget = extras_budget(ComparisonOptions(), essentials_seconds=150.0)
    assert budget.seconds == 75.0 and "options.extras.share 0.5" in budget.how and "150 s" in budget.how
    assert extras_budget(ComparisonOptions(extras={"share": 0.2}), 150.0).seconds == 30.0
    budget = extras_budget(ComparisonOptions(extras={"seconds": 300.0}), 150.0)
    assert budget.seconds == 300.0 and "options.extras.seconds" in budget.how
    # depth full: every candidate, the table to its interval target
    assert not extras_budget(ComparisonOptions(depth="full"), 150.0).bounded


def test_the_advice_budget_options_of_before_are_the_extras_budget():
    """A CI file written before the extras shared one budget still runs, with the same meaning."""
    options = ComparisonOptions.model_validate({"advice": {"budget_seconds": 60.0, "enabled": True}})
    assert options.extras.seconds == 60.0 and options.advice.enabled
    assert ComparisonOptions.model_validate({"advice": {"budget_share": 0.3}}).extras.share == 0.3
    # the new spelling wins where both are given
    both = ComparisonOptions.model_validate({"advice": {"budget_seconds": 60.0}, "extras": {"seconds": 5.0}})
    assert both.extras.seconds == 5.0


def test_further_table_samples_leave_what_the_candidates_still_need():
    budget = ExtrasBudget(10.0, "test")
    budget.start()
    assert budget.table_may_continue(5.0)
    budget.hold_for(lambda: 8.0)  # two candidates to come, 4 s each
    assert not budget.table_may_continue(5.0) and budget.table_may_continue(1.0)
    budget.hold_for(lambda: 0.0)
    assert budget.table_may_continue(5.0)
    unbounded = ExtrasBudget(None, "depth full")
    unbounded.hold_for(lambda: 1e9)
    assert unbounded.table_may_continue(1e6)


def test_the_clock_starts_once():
    budget = ExtrasBudget(1.0, "test")
    assert budget.left() == 1.0
    budget.start()
    time.sleep(0.05)
    budget.start()  # a second start (advice's work) does not restart the clock
    assert budget.spent() >= 0.05
