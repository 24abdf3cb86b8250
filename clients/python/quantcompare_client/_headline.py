"""The report's headline (``report["headline"]``: which file to ship and one card per artifact) as HTML for
``Report._repr_html_``: the cards the page shows first, with inline styles (a notebook has no stylesheet).
The server decides the choice and its rule; this module only draws what the JSON says."""

from __future__ import annotations

from html import escape
from typing import Any, Mapping, Optional

__all__ = ["headline_html"]


def _db(card: Mapping[str, Any]) -> str:
    if card.get("exact"):
        return "exact"
    v = card.get("worst_sqnr_db")
    return f"{v:.1f} dB" if isinstance(v, (int, float)) else str(card.get("accuracy") or "–")


def _card(c: Mapping[str, Any]) -> str:
    e = escape
    border = "2px solid #1a7f37" if c.get("chosen") else "1px solid #d0d7de"
    head = (f'<div style="font-size:14px"><b>{e(str(c.get("artifact")))}</b> '
            f'<span style="color:#656d76">gates {e(str(c.get("gates")))}</span>'
            + (' <b style="color:#0969da">ship this</b>' if c.get("chosen") else "") + "</div>")
    if c.get("status") != "ok":
        body = f'<div style="color:#cf222e">{e(str(c.get("status")))}: {e(str(c.get("error") or ""))}</div>'
    else:
        ratio = c.get("latency_ratio")
        cov = c.get("int8_coverage")
        rows = [("worst SQNR", _db(c)),
                ("latency", f"{ratio:.2f}× fp32" if isinstance(ratio, (int, float)) else "not measured"),
                ("int8 coverage", f"{100 * cov:.0f}%" if isinstance(cov, (int, float)) else "–"),
                ("left in float", f"{c.get('float_nodes') if c.get('float_nodes') is not None else '–'} nodes"
                 + (f" (top: {c['top_blocker']} ×{c.get('top_blocker_count')})" if c.get("top_blocker") else ""))]
        body = "".join(f'<div><span style="color:#656d76">{e(k)}</span> {e(v)}</div>' for k, v in rows)
        fix = c.get("fix")
        if fix:
            body += f'<div style="font-size:12px">measured fix <code>{e(str(fix.get("change")))}</code></div>'
    return (f'<div class="qc-card" style="border:{border};border-radius:8px;padding:6px 10px;min-width:230px;flex:1">'
            f'{head}{body}<div style="font-weight:600;font-size:12px;margin-top:3px">{e(str(c.get("verdict") or ""))}'
            "</div></div>")


def headline_html(headline: Optional[Mapping[str, Any]]) -> str:
    if not headline:
        return ""
    e = escape
    cards = "".join(_card(c) for c in headline.get("cards") or [])
    return (f'<div class="qc-headline"><p style="font-size:16px;font-weight:600;margin:4px 0">'
            f'{e(str(headline.get("sentence", "")))}</p>'
            f'<p style="color:#656d76;margin:0 0 6px">which file: {e(str(headline.get("rule", "")))}; '
            f'figures at {e(str(headline.get("level")))}</p>'
            f'<div style="display:flex;flex-wrap:wrap;gap:8px">{cards}</div></div>')
