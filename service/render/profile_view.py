"""Where the time goes, for a person: one stacked bar per artifact (the page's ``_profile.html``
partial) and the top nodes (the CLI). Both read ``artifacts.<name>.optimized.<level>.profile``
(runtime/profile.py) from the report as JSON, so the partial stands alone in any page layout."""

from __future__ import annotations

from html import escape
from typing import Any

__all__ = ["profile_bars_svg", "profile_lines", "profiled_level", "CLASS_COLORS"]

CLASS_COLORS = {"int8 kernels": "#2a9d5c", "float kernels": "#8a8f98", "Q/DQ": "#d9730d", "layout": "#2f6fdf",
                "other": "#c7c9cc"}
_ORDER = ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator")


def _as_dict(report: Any) -> dict:
    return report if isinstance(report, dict) else report.model_dump(mode="json")


def profiled_level(report: Any) -> tuple[str | None, dict[str, dict]]:
    """(the level, artifact -> its profile there): the last level at which some artifact has one."""
    r = _as_dict(report)
    arts = r.get("artifacts") or {}
    names = [n for n in _ORDER if n in arts] + sorted(n for n in arts if n not in _ORDER)
    levels = r.get("levels") or ["disable_all", "basic", "extended", "layout", "all"]
    for level in reversed(levels):
        found = {n: ((arts[n].get("optimized") or {}).get(level) or {}).get("profile") for n in names}
        found = {n: p for n, p in found.items() if p}
        if found:
            return level, found
    return None, {}


def profile_bars_svg(report: Any, *, width: int = 640) -> str:
    """One horizontal bar per artifact, its length the profiled run's total ms, stacked by class."""
    level, profiles = profiled_level(report)
    if not profiles:
        return ""
    longest = max(p["total_ms"] for p in profiles.values()) or 1.0
    label_w, row_h, bar_w = 110, 26, width - 110 - 90
    height = row_h * len(profiles) + 40
    out = [f'<svg class="profile-bars" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'role="img" aria-label="where the time goes at {escape(level)}">']
    for i, (name, p) in enumerate(profiles.items()):
        y = 8 + i * row_h
        out.append(f'<text x="0" y="{y + 14}" font-size="12">{escape(name)}</text>')
        x = float(label_w)
        for cls, color in CLASS_COLORS.items():
            ms = (p.get("by_class") or {}).get(cls, 0.0)
            w = bar_w * ms / longest
            if w <= 0:
                continue
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="18" fill="{color}">'
                       f'<title>{escape(name)}: {escape(cls)} {ms:.3g} ms</title></rect>')
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + 14}" font-size="11">{p["total_ms"]:.3g} ms</text>')
    y = 8 + len(profiles) * row_h + 6
    x = float(label_w)
    for cls, color in CLASS_COLORS.items():
        out.append(f'<rect x="{x:.0f}" y="{y}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14:.0f}" y="{y + 9}" font-size="11">{escape(cls)}</text>')
        x += 14 + 7 * len(cls) + 12
    out.append("</svg>")
    return "".join(out)


def profile_lines(report: Any, *, top: int = 5) -> list[str]:
    """The CLI's block, one line per quantized artifact: its profiled total, where it loses to fp32 (the
    first of its ``top`` nodes, ``where_it_loses``), then the rest of them as op type [kernel] and share."""
    level, profiles = profiled_level(report)
    if not profiles:
        return []
    lines = ["", f"where the time goes at {level} (one run under ORT's profiler, outside the timed runs; "
                 f"the top {top} nodes, names in report.json 'profile'):"]
    for name, p in profiles.items():
        if name == "fp32":  # the baseline each sentence compares with: on the page, not in one screen
            continue
        nodes = [f"{n['op_type']}{f'[{k}]' if (k := n.get('kernel')) else ''} {n['share']:.0%}"
                 for n in (p.get("top_nodes") or [])[:top]]
        said = (p.get("where_it_loses") or "").removeprefix(f"{name} at {level}: ")
        # the sentence names the first node's op and kernel: the others follow it
        text = (said + (f"; then {', '.join(nodes[1:])}" if nodes[1:] else "")) if said else ", ".join(nodes)
        lines.append(f"  {name:<14}{p['total_ms']:.3g} ms: {text}"[:160])
    return lines
