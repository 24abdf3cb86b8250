"""The batch dims of a torch.export program: its inputs' leading symbolic dims.

torch 2.13's ``.pt2`` keeps a dynamic dim only as a shape-env symbol (``s77``) with its range in
``range_constraints``; the ``Dim("batch")`` name given at export time is stored nowhere in the
archive (neither ``models/model.json`` nor any other member). So the rule "a symbolic leading dim
is the batch, default 1" applies to a .pt2 by position, and the default respects the range's
lower bound (a ``Dim("batch", min=2)`` defaults to 2).
"""

from __future__ import annotations


def batch_dims_from_program(program, leading: list[object]) -> dict[str, int]:
    """``{symbol: default}`` for each input's symbolic dim 0 (``leading``: those dims, as named in the specs)."""
    lower: dict[str, int] = {}
    for sym, vr in (getattr(program, "range_constraints", None) or {}).items():
        try:
            lo = int(vr.lower)
        except (TypeError, ValueError, OverflowError):  # -oo / symbolic bounds: no constraint to honour
            continue
        lower[str(sym)] = lo
    out: dict[str, int] = {}
    for d in leading:
        if isinstance(d, str) and d:
            out[d] = max(1, lower.get(d, 1))
    return out
