"""The report page's grouped bar chart, drawn in the client for ``Report._repr_html_``.

A copy of ``service/render/svg.py``'s ``bar_chart`` (the client must not import the service), with
the page's CSS classes turned into inline attributes: a notebook has no stylesheet for them, and
Jupyter strips nothing from script-free SVG. Every label goes through ``escape``.
"""

from __future__ import annotations

import math
from html import escape
from typing import Dict, List, Optional, Sequence

__all__ = ["bar_chart", "color"]

ARTIFACT_COLORS = {"fp32": "#8a8f98", "pt2e_qdq": "#d9730d", "ort_qdq": "#2f6fdf", "ort_qoperator": "#2a9d5c"}
_EXTRA_COLORS = ("#9b59b6", "#c0392b", "#16a085", "#7f8c8d")
_TITLE = 'font-size="13" font-weight="600" fill="#1f2328"'
_SMALL = 'font-size="11" fill="#59636e"'
_CAT = 'font-size="11" fill="#1f2328"'
_FONT = 'font-family="-apple-system,BlinkMacSystemFont,Segoe UI,Helvetica,Arial,sans-serif"'


def color(name: str, i: int = 0) -> str:
    return ARTIFACT_COLORS.get(name, _EXTRA_COLORS[i % len(_EXTRA_COLORS)])


def _nice_ticks(lo: float, hi: float, n: int = 5) -> List[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = [round(start, 10)]
    while ticks[-1] < hi - 1e-12:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 0.1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def bar_chart(categories: Sequence[str], series: Dict[str, List[Optional[float]]], *, title: str, unit: str,
              width: int = 620, height: int = 250) -> str:
    """Grouped bars: one group per category (level), one bar per series (artifact); None = not measured."""
    values = [v for vals in series.values() for v in vals if v is not None and math.isfinite(v)]
    if not categories or not series or not values:
        return f"<p><i>{escape(title)}: not available</i></p>"
    lo = min(0.0, min(values))
    ticks = _nice_ticks(lo, max(values))
    lo, hi = ticks[0], ticks[-1]
    left, right, top, bottom = 52, 12, 34, 62
    plot_w, plot_h = width - left - right, height - top - bottom

    def y(v: float) -> float:
        return top + plot_h * (1 - (v - lo) / (hi - lo))

    out = [f'<svg class="quantcompare-chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" {_FONT}>',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{left}" y="18" {_TITLE}>{escape(title)}</text>']
    for t in ticks:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#eaeef2"/>')
        out.append(f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end" {_SMALL}>{_fmt(t)}</text>')
    out.append(f'<text x="12" y="{top + plot_h / 2:.0f}" transform="rotate(-90 12 {top + plot_h / 2:.0f})" '
               f'text-anchor="middle" {_SMALL}>{escape(unit)}</text>')
    group_w = plot_w / len(categories)
    names = list(series)
    bar_w = min(26.0, (group_w - 10) / max(1, len(names)))
    for ci, cat in enumerate(categories):
        gx = left + ci * group_w + (group_w - bar_w * len(names)) / 2
        for si, name in enumerate(names):
            v = series[name][ci] if ci < len(series[name]) else None
            x = gx + si * bar_w
            if v is None or not math.isfinite(v):
                out.append(f'<text x="{x + bar_w / 2:.1f}" y="{y(lo) - 4:.1f}" text-anchor="middle" '
                           f'font-size="12" fill="#adb5bd">–</text>')
                continue
            y0, y1 = sorted((y(v), y(max(lo, 0.0))))
            out.append(f'<rect x="{x:.1f}" y="{y0:.1f}" width="{bar_w - 2:.1f}" height="{max(1.0, y1 - y0):.1f}" '
                       f'fill="{color(name, si)}"><title>{escape(name)} @ {escape(cat)}: {_fmt(v)} {escape(unit)}'
                       f'</title></rect>')
        out.append(f'<text x="{left + ci * group_w + group_w / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle" '
                   f'{_CAT}>{escape(cat)}</text>')
    lx = left
    for si, name in enumerate(names):
        out.append(f'<rect x="{lx}" y="{height - 20}" width="11" height="11" fill="{color(name, si)}"/>')
        out.append(f'<text x="{lx + 15}" y="{height - 10}" {_SMALL}>{escape(name)}</text>')
        lx += 24 + 7.2 * len(name)
    out.append("</svg>")
    return "".join(out)
