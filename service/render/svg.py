"""Small inline SVG drawings made on the server (the page loads nothing from elsewhere).

Two kinds: a grouped bar chart (a value per level per artifact) and a rewrite drawing (the ops
a rewrite removed -> the ops it added). Output is markup for Jinja's ``|safe``; every label
goes through ``escape``.
"""

from __future__ import annotations

import math
import re
from html import escape

ARTIFACT_COLORS = {"fp32": "#8a8f98", "pt2e_qdq": "#d9730d", "ort_qdq": "#2f6fdf", "ort_qoperator": "#2a9d5c"}
_EXTRA_COLORS = ("#9b59b6", "#c0392b", "#16a085", "#7f8c8d")


def color(name: str, i: int = 0) -> str:
    return ARTIFACT_COLORS.get(name, _EXTRA_COLORS[i % len(_EXTRA_COLORS)])


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = [round(start, 10)]
    while ticks[-1] < hi - 1e-12:  # the top tick is at or above the largest value
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


def bar_chart(categories: list[str], series: dict[str, list[float | None]], *, title: str, unit: str,
              width: int = 620, height: int = 250) -> str:
    """Grouped bars: one group per category (level), one bar per series (artifact); None = not measured."""
    values = [v for vals in series.values() for v in vals if v is not None and math.isfinite(v)]
    if not categories or not series or not values:
        return f'<p class="na">{escape(title)}: not available</p>'
    lo = min(0.0, min(values))
    ticks = _nice_ticks(lo, max(values))
    lo, hi = ticks[0], ticks[-1]
    left, right, top, bottom = 52, 12, 34, 62
    plot_w, plot_h = width - left - right, height - top - bottom

    def y(v: float) -> float:
        return top + plot_h * (1 - (v - lo) / (hi - lo))

    out = [f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{left}" y="18" class="ct">{escape(title)}</text>']
    for t in ticks:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end" class="tick">{_fmt(t)}</text>')
    out.append(f'<text x="12" y="{top + plot_h / 2:.0f}" class="tick" transform="rotate(-90 12 {top + plot_h / 2:.0f})" '
               f'text-anchor="middle">{escape(unit)}</text>')
    group_w = plot_w / len(categories)
    names = list(series)
    bar_w = min(26.0, (group_w - 10) / max(1, len(names)))
    for ci, cat in enumerate(categories):
        gx = left + ci * group_w + (group_w - bar_w * len(names)) / 2
        for si, name in enumerate(names):
            v = series[name][ci] if ci < len(series[name]) else None
            x = gx + si * bar_w
            if v is None or not math.isfinite(v):
                out.append(f'<text x="{x + bar_w / 2:.1f}" y="{y(lo) - 4:.1f}" text-anchor="middle" class="nabar">–</text>')
                continue
            y0, y1 = sorted((y(v), y(max(lo, 0.0))))
            out.append(f'<rect x="{x:.1f}" y="{y0:.1f}" width="{bar_w - 2:.1f}" height="{max(1.0, y1 - y0):.1f}" '
                       f'fill="{color(name, si)}"><title>{escape(name)} @ {escape(cat)}: {_fmt(v)} {escape(unit)}</title></rect>')
        out.append(f'<text x="{left + ci * group_w + group_w / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle" '
                   f'class="cat">{escape(cat)}</text>')
    out.append(legend(names, left=left, baseline=height - 10))
    out.append("</svg>")
    return "".join(out)


def legend(names, *, left: float, baseline: float) -> str:
    """One swatch and name per series, left to right, in the series' colours."""
    out, lx = [], left
    for i, name in enumerate(names):
        out.append(f'<rect x="{lx}" y="{baseline - 10}" width="11" height="11" fill="{color(name, i)}"/>')
        out.append(f'<text x="{lx + 15}" y="{baseline}" class="leg">{escape(name)}</text>')
        lx += 24 + 7.2 * len(name)
    return "".join(out)


_ITEM = re.compile(r"^(?P<op>.+?)(?:\s+x(?P<n>\d+))?$")


def parse_rewrite(summary: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]]] | None:
    """'DequantizeLinear x3 + Conv + Relu + QuantizeLinear -> QLinearConv' -> ([(DQ,3),(Conv,1),...], [(QLinearConv,1)])."""
    if "->" not in summary:
        return None
    before, _, after = summary.partition("->")

    def split_top(text: str) -> list[str]:
        # '+' inside parentheses belongs to a note, e.g. "uint8 (QuantizeLinear + DequantizeLinear rewritten)".
        parts, depth, cur = [], 0, ""
        for ch in text:
            depth += (ch == "(") - (ch == ")")
            if ch == "+" and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        return parts + [cur]

    def side(text: str) -> list[tuple[str, int]]:
        items = []
        for part in split_top(text):
            part = part.strip()
            if not part or part in ("(nothing)", "nothing", "∅"):
                continue
            m = _ITEM.match(part)
            items.append((m["op"].strip(), int(m["n"] or 1)))
        return items

    return side(before), side(after)


def _op_fill(op: str) -> str:
    short = op.rsplit(".", 1)[-1]
    if short in ("QuantizeLinear", "DequantizeLinear"):
        return "#e9ecef"
    if short.startswith("QLinear") or short.startswith("Q") and short[1:2].isupper() or "Integer" in short:
        return "#d3f0dc"
    if short in ("Transpose", "ReorderInput", "ReorderOutput"):
        return "#fde2c4"
    return "#dbe7fb"


def rewrite_drawing(summary: str) -> str:
    """Before and after as two rows of op boxes; falls back to plain text if the summary has no arrow."""
    parsed = parse_rewrite(summary)
    if parsed is None:
        return f"<code>{escape(summary)}</code>"
    before, after = parsed
    box_h, gap, pad, char_w = 22, 8, 6, 6.6

    def box_w(op: str, n: int) -> float:
        return len(op + (f" ×{n}" if n > 1 else "")) * char_w + 2 * pad

    def row(items, y) -> tuple[list[str], float]:
        x, parts = 70.0, []
        if not items:
            parts.append(f'<text x="{x}" y="{y + 15}" class="rwnone">(nothing)</text>')
            return parts, x + 70
        for i, (op, n) in enumerate(items):
            w = box_w(op, n)
            label = op + (f" ×{n}" if n > 1 else "")
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{box_h}" rx="4" fill="{_op_fill(op)}" '
                         f'stroke="#6c757d" stroke-width="0.8"/>')
            parts.append(f'<text x="{x + w / 2:.1f}" y="{y + 15}" text-anchor="middle" class="op">{escape(label)}</text>')
            x += w
            if i < len(items) - 1:
                parts.append(f'<line x1="{x:.1f}" y1="{y + box_h / 2}" x2="{x + gap:.1f}" y2="{y + box_h / 2}" stroke="#6c757d"/>')
                x += gap
        return parts, x

    top, top_w = row(before, 4)
    bot, bot_w = row(after, 4 + box_h + 18)
    width = int(max(top_w, bot_w) + 8)
    height = 4 + 2 * box_h + 22
    return (f'<svg class="rw" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(summary)}">'
            f'<text x="4" y="19" class="rwl">before</text><text x="4" y="{4 + box_h + 33}" class="rwl">after</text>'
            f'<path d="M40 {4 + box_h + 2} v12 m-4 -5 l4 5 l4 -5" stroke="#6c757d" fill="none"/>'
            + "".join(top) + "".join(bot) + "</svg>")
