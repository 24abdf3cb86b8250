"""The headline (verdict/headline.py) as the first lines of the CLI summary: the answer, then one line per card."""

from __future__ import annotations

from service.schemas.headline import Headline, HeadlineCard

__all__ = ["headline_lines"]


def _card_line(c: HeadlineCard) -> list[str]:
    mark = "*" if c.chosen else " "
    if c.status != "ok":
        return [f" {mark} {c.artifact:<14}{c.status}: {(c.error or '')[:90]}"]
    sqnr = "exact" if c.exact else (f"{c.worst_sqnr_db:.1f} dB" if c.worst_sqnr_db is not None else (c.accuracy or "-"))
    ratio = f"{c.latency_ratio:.2f}x fp32" if c.latency_ratio is not None else "latency -"
    cov = f"int8 {100 * c.int8_coverage:.0f}%" if c.int8_coverage is not None else "int8 -"
    floats = f"float {c.float_nodes}" + (f" ({c.top_blocker} x{c.top_blocker_count})" if c.top_blocker else "")
    lines = [f" {mark} {c.artifact:<14}gates {c.gates:<7}{sqnr:>9}  {ratio:<12}{cov:<10}{floats}",
             f"   {'':<14}{c.verdict}"]
    if c.fix is not None:
        f = c.fix
        db = lambda v: "exact" if v is None else f"{v:.1f} dB"  # noqa: E731
        ms = (f", {f.latency_ms_before:.3g} -> {f.latency_ms_after:.3g} ms"
              if f.latency_ms_before and f.latency_ms_after else "")
        lines.append(f"   {'':<14}measured fix {f.change}: {db(f.sqnr_db_before)} -> {db(f.sqnr_db_after)}{ms}")
    return lines


def headline_lines(headline: Headline | None) -> list[str]:
    if headline is None:
        return []
    lines = [headline.sentence, f"  (which file: {headline.rule}; figures at {headline.level})"]
    for c in headline.cards:
        lines += _card_line(c)
    return lines
