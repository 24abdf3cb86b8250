"""Which file to ship, and one card per quantized artifact: the report's first answer.

Pure: reads the report as its JSON (plain dicts, ``Report.model_dump(mode="json")``) and returns a
``Headline``. A field a report lacks (an older schema, a failed path, a stage that did not run) leaves
its figure None; fields other issues add (advice's ``recipe``) are used when present.

The rule (stated in RULE, docs/report.md and on the page):
1. A file qualifies when its path is ok, its accuracy was measured, and every gate that names it
   (``<artifact>.<level>.<metric>...``) passed.
2. Among qualifying files faster than fp32 at the deployed level: the fastest, unless one within 10%
   of its time is at least 1 dB more accurate (advice's adopt thresholds: 10% of time, 1 dB of SQNR);
   then that one (the most accurate of those within 10%).
3. When none is faster than fp32 (or latency was not measured): the most accurate qualifying file.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

from service.schemas.headline import Headline, HeadlineCard, HeadlineFix

__all__ = ["RULE", "TIME_MARGIN", "SQNR_MARGIN_DB", "deployed_level", "headline_from_report", "which_file"]

LEVEL_ORDER = ("disable_all", "basic", "extended", "layout", "all")
TIME_MARGIN = 0.10  # a file this much slower than the fastest still wins by accuracy (advice: 10%)
SQNR_MARGIN_DB = 1.0  # ... when it is at least this much more accurate (advice: 1 dB)
RULE = ("the fastest file that passes its gates and runs faster than fp32, unless a file within 10% of its time "
        "is at least 1 dB more accurate (then that one); when none is faster than fp32, the most accurate file "
        "that passes its gates")


def deployed_level(report: dict) -> str | None:
    """``all`` (ORT's default session level) when some artifact ran it, else the highest level that ran."""
    seen: set[str] = set()
    for art in (report.get("artifacts") or {}).values():
        seen |= {lv for lv, o in ((art or {}).get("optimized") or {}).items() if o and not o.get("error")}
    ordered = [lv for lv in LEVEL_ORDER if lv in seen] + sorted(seen - set(LEVEL_ORDER))
    return "all" if "all" in seen else (ordered[-1] if ordered else None)


def _accuracy_key(card: HeadlineCard) -> float:
    """Higher is more accurate: exact (no error at all) beats any SQNR; no figure ranks last."""
    if card.exact:
        return math.inf
    return card.worst_sqnr_db if card.worst_sqnr_db is not None else -math.inf


def which_file(cards: list[HeadlineCard]) -> tuple[str | None, str]:
    """The artifact the rule picks among ``cards`` and why, in a few words (see the module's docstring)."""
    ok = [c for c in cards if c.status == "ok" and c.accuracy not in (None, "not measured") and c.gates != "failed"]
    if not ok:
        return None, "no file qualifies"
    faster = [c for c in ok if c.latency_ratio is not None and c.latency_ratio < 1.0]
    if faster:
        fastest = min(faster, key=lambda c: c.latency_ratio)
        close = [c for c in faster if c.latency_ratio <= fastest.latency_ratio * (1 + TIME_MARGIN)]
        best = max(close, key=_accuracy_key)
        if best is not fastest and _accuracy_key(best) >= _accuracy_key(fastest) + SQNR_MARGIN_DB:
            return best.artifact, "within 10% of the fastest and at least 1 dB more accurate"
        return fastest.artifact, "the fastest that passes"
    return max(ok, key=_accuracy_key).artifact, ("none is faster than fp32: the most accurate"
                                                 if any(c.latency_ratio is not None for c in ok)
                                                 else "latency not measured: the most accurate")


def _change_text(change: dict) -> str:
    parts = []
    for scope, kv in (change or {}).items():
        for k, v in (kv or {}).items() if isinstance(kv, dict) else [(scope, kv)]:
            key = k if k.startswith(f"{scope}.") else f"{scope}.{k}"
            parts.append(f"{key}={json.dumps(v, separators=(',', ':'))}")
    return ", ".join(parts)


def _fix_for(report: dict, artifact: str) -> HeadlineFix | None:
    """The first adopted, measured advice entry for the artifact (advice lists the better ones first)."""
    for a in report.get("advice") or []:
        m = a.get("measured") or {}
        if a.get("artifact") != artifact or not m:
            continue
        b, f = m.get("before") or {}, m.get("after") or {}
        return HeadlineFix(change=_change_text(a.get("change") or {}), sqnr_db_before=b.get("sqnr_db"),
                           sqnr_db_after=f.get("sqnr_db"), latency_ms_before=b.get("latency_ms"),
                           latency_ms_after=f.get("latency_ms"), int8_coverage_before=b.get("int8_coverage"),
                           int8_coverage_after=f.get("int8_coverage"), recipe=a.get("recipe"))
    return None


def _gates_for(report: dict, artifact: str) -> tuple[str, list[str]]:
    gates = [g for g in ((report.get("verdict") or {}).get("gates") or [])
             if str(g.get("gate", "")).split(".")[0] == artifact]
    failed = [f"{g.get('gate')}: {g.get('message', '')}".rstrip(": ") for g in gates if not g.get("passed")]
    return ("failed" if failed else "passed" if gates else "none"), failed


def _card(report: dict, name: str, level: str | None) -> HeadlineCard:
    art = (report.get("artifacts") or {}).get(name) or {}
    err = art.get("error") or {}
    status = art.get("status", "?")
    gates, failures = _gates_for(report, name)
    if status != "ok":
        return HeadlineCard(artifact=name, status=status, gates=gates, gate_failures=failures, level=level,
                            error=f"{err.get('stage', '?')}: {err.get('message', '')}" if err else None)
    at = ((art.get("optimized") or {}).get(level) or {}) if level else {}
    ref = ((((report.get("artifacts") or {}).get("fp32") or {}).get("optimized") or {}).get(level) or {}) if level else {}
    num = at.get("numerics") or {}
    lat, ref_lat = (at.get("latency") or {}).get("median_ms"), (ref.get("latency") or {}).get("median_ms")
    unfused = at.get("unfused") or []
    top = Counter(u.get("blocker") for u in unfused).most_common(1)
    top_code = top[0][0] if top else None
    accuracy = num.get("accuracy") if num else None
    return HeadlineCard(
        artifact=name, status=status, level=level, gates=gates, gate_failures=failures,
        worst_sqnr_db=num.get("worst_sqnr_db"), accuracy=accuracy,
        exact=bool(num) and num.get("worst_sqnr_db") is None and (num.get("elementwise_outputs") or 0) > 0,
        latency_ms=lat, latency_ratio=(lat / ref_lat) if lat and ref_lat else None,
        latency_noisy=bool((at.get("latency") or {}).get("noisy") or (ref.get("latency") or {}).get("noisy")),
        int8_coverage=at.get("int8_coverage"), float_nodes=len(unfused) if at else None,
        top_blocker=top_code, top_blocker_count=top[0][1] if top else 0,
        top_blocker_fix=next((u.get("fix") for u in unfused if u.get("blocker") == top_code), None),
        fix=_fix_for(report, name))


def _db(v: float | None, exact: bool = False) -> str:
    return "exact" if exact else "–" if v is None else f"{v:.1f} dB"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _lose_line(c: HeadlineCard, chosen: HeadlineCard | None) -> str:
    if c.status != "ok":
        return f"{c.status}: {c.error or 'no file'}"
    if c.gates == "failed":
        return "fails " + "; ".join(c.gate_failures)
    if c.accuracy in (None, "not measured"):
        return "accuracy not measured"
    if chosen is None:
        return ""
    d_acc = _accuracy_key(chosen) - _accuracy_key(c)
    if c.latency_ratio is not None and c.latency_ratio >= 1.0:
        return f"slower than fp32 ({_x(c.latency_ratio)})"
    if chosen.latency_ratio is not None and c.latency_ratio is not None and c.latency_ratio < chosen.latency_ratio:
        return (f"{_x(c.latency_ratio)} vs {_x(chosen.latency_ratio)}, but {d_acc:.1f} dB less accurate"
                if math.isfinite(d_acc) else f"{_x(c.latency_ratio)}, less accurate")
    if math.isfinite(d_acc) and d_acc < 0:
        return f"{-d_acc:.1f} dB more accurate, but slower ({_x(c.latency_ratio)} vs {_x(chosen.latency_ratio)})"
    return f"slower ({_x(c.latency_ratio)} vs {_x(chosen.latency_ratio)})" + (
        f", {d_acc:.1f} dB less accurate" if math.isfinite(d_acc) and d_acc > 0 else "")


def _sentence(chosen: HeadlineCard | None, why: str, level: str | None, cards: list[HeadlineCard]) -> str:
    if chosen is None:
        if not [c for c in cards if c.status == "ok"]:
            return "No quantized file was made: see each card for the error."
        return ("No file qualifies: each one failed, failed a gate that names it, or has no accuracy figure. "
                "The cards say which.")
    speed = (f"{_x(chosen.latency_ratio)} fp32's time" if chosen.latency_ratio is not None else "latency not measured")
    return (f"Ship {chosen.artifact}: {_db(chosen.worst_sqnr_db, chosen.exact)} worst SQNR, {speed} at {level}; "
            f"{why}." + _better_with_fix(chosen, cards))


def _better_with_fix(chosen: HeadlineCard, cards: list[HeadlineCard]) -> str:
    """When advice measured a change that makes some file faster than the chosen one (at no more than 1 dB of
    SQNR below it), the sentence says so: that is what to change."""
    best = None
    for c in cards:
        f = c.fix
        if c.status != "ok" or f is None or not (f.latency_ms_after and c.latency_ms and c.latency_ratio):
            continue
        ratio = f.latency_ms_after / (c.latency_ms / c.latency_ratio)  # over fp32's median at the same level
        sqnr = f.sqnr_db_after if f.sqnr_db_after is not None else math.inf
        if ((chosen.latency_ratio is None or ratio < chosen.latency_ratio * (1 - TIME_MARGIN))
                and sqnr >= _accuracy_key(chosen) - SQNR_MARGIN_DB and (best is None or ratio < best[0])):
            best = (ratio, c, f)
    if best is None:
        return ""
    ratio, c, f = best
    return (f" Measured: {c.artifact} with {f.change} runs at {_x(ratio)} fp32's time, "
            f"{_db(f.sqnr_db_after, f.sqnr_db_after is None)}.")


def headline_from_report(report: dict, *, made_up_data: str | None = None) -> Headline:
    """The headline of a report (its JSON form). ``made_up_data``: the one-line warning, when the samples were
    generated (verdict/made_up_data.py)."""
    level = deployed_level(report)
    names = [n for n in (report.get("artifacts") or {}) if n != "fp32"]
    cards = [_card(report, n, level) for n in names]
    choice, why = which_file(cards)
    chosen = next((c for c in cards if c.artifact == choice), None)
    done = []
    for c in cards:
        line = (f"picked: {why}" if c is chosen else _lose_line(c, chosen))
        done.append(c.model_copy(update={"chosen": c is chosen, "verdict": line}))
    done.sort(key=lambda c: not c.chosen)  # stable: the chosen file first, the rest in the report's order
    return Headline(level=level, cards=done, choice=choice, sentence=_sentence(chosen, why, level, cards), rule=RULE,
                    made_up_data=made_up_data)
