"""Plain-text tables whose columns fit their widest cell, so no value runs into its neighbour."""

from __future__ import annotations

GAP = 2


def aligned_rows(rows: list[list[str]], *, min_widths: list[int] | None = None) -> list[str]:
    """Each row's cells left-aligned in columns as wide as the widest cell plus a gap."""
    ncol = max((len(r) for r in rows), default=0)
    widths = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(ncol)]
    if min_widths:
        widths = [max(w, m) for w, m in zip(widths, list(min_widths) + [0] * ncol)]
    out = []
    for r in rows:
        cells = [f"{c:<{widths[i] + GAP}}" for i, c in enumerate(r[:-1])] + [r[-1]] if r else []
        out.append("".join(cells).rstrip())
    return out
