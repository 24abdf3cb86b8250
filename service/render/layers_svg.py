"""The report page's per-tensor error views: SQNR by depth (one line per artifact, server-side
SVG, no scripts) and the worst-N table. Works on the report's JSON (``report["layers"]``)."""

from __future__ import annotations

import math
from html import escape

from service.render.svg import color, legend

CLEAN_DB = 100.0  # an exact tensor (infinite SQNR) is drawn at the top of the axis, not at infinity


def sqnr_by_depth(layers: dict | None, *, width: int = 680, height: int = 270) -> str:
    """One polyline per artifact: the worst SQNR among the tensors at each depth of the fp32 graph."""
    title = "SQNR vs fp32 by depth (worst tensor at each depth; higher is better)"
    rows = (layers or {}).get("rows") or []
    series: dict[str, dict[int, tuple[float, str]]] = {}
    for r in rows:
        for a, c in (r.get("artifacts") or {}).items():
            v = c.get("sqnr_db")
            v = CLEAN_DB if v is None else float(v)
            if not math.isfinite(v):
                continue
            d = int(r.get("depth") or 0)
            if d not in series.setdefault(a, {}) or v < series[a][d][0]:
                series[a][d] = (v, r.get("tensor", ""))
    values = [v for s in series.values() for v, _ in s.values()]
    if not values:
        return f'<p class="na">{escape(title)}: not available</p>'
    depths = sorted({d for s in series.values() for d in s})
    d_lo, d_hi = depths[0], max(depths[-1], depths[0] + 1)
    lo = math.floor(min(values) / 10) * 10
    hi = math.ceil(max(values) / 10) * 10
    hi = hi if hi > lo else lo + 10
    left, right, top, bottom = 52, 14, 34, 60
    pw, ph = width - left - right, height - top - bottom

    def x(d: float) -> float:
        return left + pw * (d - d_lo) / (d_hi - d_lo)

    def y(v: float) -> float:
        return top + ph * (1 - (v - lo) / (hi - lo))

    out = [f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{left}" y="18" class="ct">{escape(title)}</text>']
    step = 10 if hi - lo <= 80 else 20
    t = lo
    while t <= hi + 1e-9:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end" class="tick">{t:g}</text>')
        t += step
    out.append(f'<text x="12" y="{top + ph / 2:.0f}" class="tick" transform="rotate(-90 12 {top + ph / 2:.0f})" '
               f'text-anchor="middle">dB</text>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{top + ph + 28}" text-anchor="middle" class="tick">'
               f'depth in the fp32 graph (ops from the input)</text>')
    for d in (d_lo, (d_lo + d_hi) // 2, d_hi):
        out.append(f'<text x="{x(d):.1f}" y="{top + ph + 14}" text-anchor="middle" class="tick">{d}</text>')
    for i, (a, pts) in enumerate(series.items()):
        col = color(a, i)
        ordered = sorted(pts.items())
        path = " ".join(f"{x(d):.1f},{y(v):.1f}" for d, (v, _) in ordered)
        out.append(f'<polyline points="{path}" fill="none" stroke="{col}" stroke-width="1.8"/>')
        for d, (v, tensor) in ordered:
            label = "exact" if v >= CLEAN_DB else f"{v:.1f} dB"
            out.append(f'<circle cx="{x(d):.1f}" cy="{y(v):.1f}" r="2.6" fill="{col}">'
                       f'<title>{escape(a)}: {escape(tensor)} (depth {d}): {label}</title></circle>')
    out.append(legend(series, left=left, baseline=height - 8))
    out.append("</svg>")
    return "".join(out)


def worst_rows(layers: dict | None, n: int = 10) -> list[dict]:
    """The n rows with the lowest SQNR in any artifact, worst first, for the page's table."""
    rows = (layers or {}).get("rows") or []

    def worst(r: dict) -> float:
        vals = [c.get("sqnr_db") for c in (r.get("artifacts") or {}).values()]
        finite = [v for v in vals if v is not None]
        return min(finite) if finite else math.inf

    ranked = sorted((r for r in rows if r.get("artifacts")), key=worst)
    return [r for r in ranked[:n] if worst(r) < math.inf]
