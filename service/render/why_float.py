"""Why nodes stayed float and what to change, as the CLI lines and the page's rows.

Reads the report as plain dicts (the page's view) or as the pydantic ``Report`` (the CLI): both
end up as dicts here, so an older report without these fields renders as nothing.
"""

from __future__ import annotations

import json
from typing import Any

from service.pipeline.inspect.blockers import grouped_blockers
from service.schemas.options import LEVELS
from service.schemas.advice import UnfusedNode

__all__ = ["advice_rows", "blocker_groups", "short_fix", "why_float_lines"]

_QUANT = ("pt2e_qdq", "ort_qdq", "ort_qoperator")


def _as_dict(report: Any) -> dict:
    return report.model_dump(mode="json") if hasattr(report, "model_dump") else dict(report)


def blocker_groups(report: Any, level: str | None = None) -> list[dict]:
    """Per quantized artifact, at ``level`` (default: the highest level that ran): the grouped rows."""
    r = _as_dict(report)
    out = []
    for name, art in (r.get("artifacts") or {}).items():
        opt = art.get("optimized") or {}
        if name == "fp32" or not opt:
            continue
        lv = level or next((x for x in reversed(LEVELS) if x in opt and not (opt[x] or {}).get("error")), None)
        rows = [UnfusedNode.model_validate(x) for x in ((opt.get(lv) or {}).get("unfused") or [])]
        if not rows:
            continue
        groups = [{"count": k, "op_type": op, "blocker": code, "phrase": phrase, "fix": fix}
                  for k, op, code, phrase, fix in grouped_blockers(rows)]
        out.append({"artifact": name, "level": lv, "total": len(rows), "groups": groups})
    return out


def short_fix(fix: str) -> str:
    """The fix up to its first parenthesis, comma or semicolon: what fits on a CLI line."""
    for sep in (" (", ", ", "; "):
        fix = fix.split(sep)[0]
    return fix


def _change(change: dict) -> str:
    parts = []
    for scope, kv in change.items():
        for k, v in kv.items():
            key = k if k.startswith(f"{scope}.") else f"{scope}.{k}"
            parts.append(f"{key}={json.dumps(v, separators=(',', ':'))}")
    return ", ".join(parts)


def _fig(f: dict | None) -> dict:
    f = f or {}
    return {"coverage": f.get("int8_coverage"), "latency_ms": f.get("latency_ms"), "sqnr_db": f.get("sqnr_db")}


def advice_rows(report: Any, *, refuted: bool = False, not_run: bool = False) -> list[dict]:
    r = _as_dict(report)
    rows = []
    for a in r.get("advice_not_run" if not_run else "advice_refuted" if refuted else "advice") or []:
        m = a.get("measured") or {}
        fused = a.get("blocked_fused")
        rows.append({"artifact": a.get("artifact"), "change": _change(a.get("change") or {}),
                     "fused": None if fused is None else f"{len(fused)}/{a.get('blocked_nodes') or 0}",
                     "reason": a.get("reason", ""), "before": _fig(m.get("before")), "after": _fig(m.get("after")),
                     "measured": bool(m), "seconds": m.get("seconds"), "how": m.get("how", ""),
                     "level": (m.get("after") or {}).get("level"),
                     "recipe": (a.get("recipe") or {}).get("python"), "recipe_exact": (a.get("recipe") or {}).get("exact")})
    return rows


def _f(v, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def why_float_lines(report: Any, *, max_groups: int = 6) -> list[str]:
    """The CLI's block: blockers grouped per artifact, then advice as a before -> after table."""
    lines: list[str] = []
    for g in blocker_groups(report):
        lines += ["", f"why {g['artifact']} stays float at {g['level']} ({g['total']} nodes):"]
        for grp in g["groups"][:max_groups]:
            lines.append(f"  {grp['count']} {grp['op_type']}: {grp['phrase']} -> {short_fix(grp['fix'])} [{grp['blocker']}]")
        if len(g["groups"]) > max_groups:
            lines.append(f"  ... {len(g['groups']) - max_groups} more groups in the report")
    rows = advice_rows(report)
    if rows:
        lines += ["", "advice (re-run and measured):",
                  f"  {'artifact':<14}{'change':<52}{'int8 coverage':<16}{'latency ms':<18}{'SQNR dB':<16}"
                  "blocked nodes fused"]
        for x in rows:
            b, a = x["before"], x["after"]
            if x["measured"]:
                cov = f"{_f(b['coverage'], '.2f')} -> {_f(a['coverage'], '.2f')}"
                lat = f"{_f(b['latency_ms'], '.2f')} -> {_f(a['latency_ms'], '.2f')}"
                sq = f"{_f(b['sqnr_db'], '.1f', 'exact')} -> {_f(a['sqnr_db'], '.1f', 'exact')}"
            else:
                cov = lat = sq = "not re-run"
            lines.append(f"  {x['artifact']:<14}{x['change'][:50]:<52}{cov:<16}{lat:<18}{sq:<16}{x['fused'] or '-'}")
    not_run = advice_rows(report, not_run=True)
    if not_run:
        lines.append(f"not re-run (advice budget): {len(not_run)} change{'s' if len(not_run) != 1 else ''} "
                     f"({'; '.join(x['artifact'] + ' ' + x['change'] for x in not_run)[:90]}): the reasons are in "
                     "report.json 'advice_not_run'")
    refuted = advice_rows(report, refuted=True)
    if refuted:
        # One line on the CLI (the summary fits a screen); the page and report.json hold the figures.
        lines.append(f"measured and refuted (not proposed): {len(refuted)} change{'s' if len(refuted) != 1 else ''} "
                     f"({'; '.join(x['artifact'] + ' ' + x['change'] for x in refuted)[:90]}): "
                     "figures on the page and in report.json 'advice_refuted'")
    return lines
