"""The levels part of the CLI's one-screen summary: SQNR and latency per artifact per level, int8
coverage, where each decision is made, and the lints."""

from __future__ import annotations

import re

from service.schemas.options import LEVELS
from service.render.text_table import aligned_rows
from service.render.units import accuracy_word

__all__ = ["levels_summary_lines"]

_COL = 15
_DECISION_COLUMNS = 3
_DCOL = 24
_LABEL = 40


def _cell(ol) -> str:
    if ol is None:
        return "-"
    if ol.error:
        return "error"
    n = ol.numerics
    if n is None:
        sq = "-"
    elif n.elementwise_outputs == 0 and n.outputs:  # no output judged by SQNR: labels, angles, shapes, nothing
        sq = accuracy_word(n.model_dump())
    else:
        sq = "exact" if n.worst_sqnr_db is None else f"{n.worst_sqnr_db:.1f}"
    # "~": the latency is marked noisy (measured under load, or never stable); the legend says so.
    lat = "" if ol.latency is None else f" | {ol.latency.median_ms:.2f}{'~' if ol.latency.noisy else ''}"
    return sq + lat


def _short(where: str) -> str:
    """A cell that fits: the level or 'file', without the parenthesised detail the page shows."""
    w = where.replace("at session level ", "").replace("from session level ", "from ").replace("in the file", "file")
    w = w.replace("never in an int8 kernel", "never int8")
    if w.startswith("n/a"):
        return "n/a"
    while True:  # drop (...) details, innermost first
        stripped = re.sub(r"\s*\([^()]*\)", "", w)
        if stripped == w:
            break
        w = stripped
    w = w.replace("; ", ", ").strip()
    return w if len(w) <= _DCOL - 2 else w[: _DCOL - 5] + "..."


def levels_summary_lines(report) -> list[str]:
    arts = {k: a for k, a in report.artifacts.items() if a.status == "ok" and a.optimized}
    if not arts:
        return []
    levels = [lv for lv in LEVELS if any(lv in a.optimized for a in arts.values())]
    has_latency = any(ol.latency for a in arts.values() for ol in a.optimized.values())
    threads = next((ol.latency.intra_op_threads for a in arts.values() for ol in a.optimized.values()
                    if ol.latency), None)
    unit = "worst SQNR dB vs fp32" + (f" | median ms ({threads} thread{'s' if threads != 1 else ''})"
                                      if has_latency else "")
    grid = [["levels", *levels]] + [[name, *(_cell(art.optimized.get(lv)) for lv in levels)]
                                    for name, art in arts.items()]
    lines = aligned_rows(grid, min_widths=[14] + [_COL - 2] * len(levels))
    lines[0] += f"  ({unit}; ORT's default: all)"
    noisy = [(name, lv, ol.latency) for name, art in arts.items() for lv, ol in art.optimized.items()
             if ol.latency is not None and ol.latency.noisy and not ol.latency.timed_with]
    if noisy:
        _name, _lv, lat = noisy[0]
        why = lat.noisy_reasons[-1] if lat.noisy_reasons else "noisy"  # load reasons come last
        line = f"~ noisy latency ({len(noisy)} of the timed graphs; e.g. {why}): time on a quiet machine"
        lines.append(line if len(line) <= 150 else line[:147] + "...")
    cov = []
    for name, art in arts.items():
        if name == "fp32":
            continue
        vals = [art.optimized[lv].int8_coverage for lv in levels if lv in art.optimized]
        if any(v is not None for v in vals):
            cov.append(f"{name} " + "/".join("-" if v is None else f"{v:.2f}" for v in vals))
    if cov:
        lines.append("int8 coverage per level: " + "; ".join(cov))
    differ = []  # integer outputs (labels, indices) have no SQNR: the share that differs from fp32
    for name, art in arts.items():
        vals = [ol.numerics.worst_mismatch_share if ol.numerics else None
                for ol in (art.optimized.get(lv) for lv in levels) if ol is not None]
        if any(vals):
            differ.append(f"{name} " + "/".join("-" if v is None else f"{100 * v:.1f}%" for v in vals))
    if differ:
        lines.append("labels (integer outputs) differing from fp32 per level: " + "; ".join(differ))
    if report.decisions:
        quant = [n for n in arts if n != "fp32"]
        # A decision every artifact takes alike is one line for all of them; the rest fold three artifacts a
        # table, so six or more (tool paths, brought files) stay within a terminal.
        rows, same = [], []
        for row in report.decisions:
            cells = [_short(row.where.get(n, "-")) for n in quant]
            if not any(n in row.where for n in quant):
                continue
            if len(quant) > 1 and len(set(cells)) == 1:
                same.append(f"{row.decision} ({cells[0]})")
            else:
                rows.append((row.decision[:_LABEL - 1], cells))
        for start in range(0, len(quant), _DECISION_COLUMNS):
            fold = quant[start:start + _DECISION_COLUMNS]
            table = [["decision", *fold]] + [[d, *cells[start:start + len(fold)]] for d, cells in rows]
            lines += [""] + aligned_rows(table, min_widths=[_LABEL - 2] + [_DCOL - 2] * len(fold))
        if same:
            lines.append(("the same for every artifact: " + "; ".join(same))[:160])
    for lint in report.lints[:4]:
        where = f" {lint.artifact}" if lint.artifact else ""
        lines.append(f"lint {lint.severity}{where} {lint.code}: {lint.hint or lint.message}"[:160])
    if len(report.lints) > 4:
        lines.append(f"... {len(report.lints) - 4} more lints in the report")
    return lines
