"""``options.baseline``: the earlier comparison a relative gate compares with, looked up in the job store.

The core evaluates gates from numbers alone (``Gate.baseline_values``); this is the one place that
turns a comparison id into those numbers, at submit time, so a bad id is a 422 now rather than a
failed job later, and the resolved figures are part of the options the report echoes.
"""

from __future__ import annotations

from service.errors import InvalidOptions, shown
from service.pipeline.verdict.gates import baseline_values_from_report
from service.schemas.options import ComparisonOptions

_HINT = "options.baseline is the id of an earlier comparison that succeeded (the 'id' in its report.json)"


def options_with_baseline(options: ComparisonOptions, executor, reports) -> ComparisonOptions:
    """Fill ``baseline_values`` of every relative gate from the report of ``options.baseline``."""
    if options.baseline is None or not any(g.relative_to and g.baseline_values is None for g in options.gates):
        return options
    rec = executor.get(options.baseline)
    if rec is None:
        raise InvalidOptions(f"options.baseline: no comparison with id {shown(options.baseline)!r} on this server", hint=_HINT)
    if rec.status != "succeeded":
        raise InvalidOptions(f"options.baseline: comparison {options.baseline} is {rec.status}, not succeeded",
                             hint="wait for it to finish, or pick a comparison that succeeded")
    baseline = reports.load(executor.files, rec.id)
    if baseline is None:
        raise InvalidOptions(f"options.baseline: the report of {options.baseline} is gone or was written by "
                             "another report schema", hint="run the baseline again on this server version")
    gates = [
        g.model_copy(update={"baseline_values": baseline_values_from_report(baseline, g)})
        if g.relative_to and g.baseline_values is None else g
        for g in options.gates
    ]
    return options.model_copy(update={"gates": gates})
