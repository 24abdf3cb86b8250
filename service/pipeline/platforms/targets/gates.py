"""Gates on a target or platform of ``options.platforms``: ``<platform>.[artifact.][level.]metric[op value]``.

    qnn:69.ort_qdq.compiles             the file compiles on the target (and did not fall back to ORT's CPU EP)
    ort:1.22.1.same_graphs              the release writes the same graphs as this machine's ORT (every artifact
                                        and level: op counts, fused kernels, layout, blockers)
    openvino:cpu.ort_qdq.sqnr_db>=30    accuracy against fp32 on this machine, same samples, same judges
    qnn:69.pt2e_qdq.nodes_taken_share>=0.9

A platform missing from the report, unavailable, or without the figure fails the gate with the reason, as the
host's gates do. ``compiles`` and ``same_graphs`` are flags (default ``>=1``: every artifact asked).
"""

from __future__ import annotations

import math
from typing import Any

from service.pipeline.verdict.gates import TARGET_FLAG_METRICS
from service.schemas.report import GateResult

__all__ = ["target_gate_result"]

_NUMERIC = {"sqnr_db": "worst_sqnr_db", "cosine": "worst_cosine", "max_abs_error": "worst_max_abs_error"}


def _names(report: Any, gate: Any) -> list[str]:
    if gate.artifact != "*":
        return [gate.artifact]
    return list(getattr(report.options, "artifacts", None) or [])


def _compiles(p: Any, name: str) -> tuple[float | None, str]:
    art = p.artifacts.get(name)
    if art is not None:
        return (1.0, "ok") if art.status == "ok" else (0.0, (art.fallback or art.error or "failed")[:300])
    per_level = p.optimized.get(name)
    if per_level is None:
        return None, "not run on this platform"
    bad = [f"{lv}: {ol.error}" for lv, ol in per_level.items() if ol.error and not ol.op_histogram]
    return (0.0, "; ".join(bad)[:300]) if bad else (1.0, "ok")


def _same_graphs(p: Any, name: str) -> tuple[float | None, str]:
    rows = [r for r in p.side_by_side if r.artifact == name]
    if not rows:
        return None, "no level graphs to compare (same_graphs is for ort:<version> and arm64)"
    differ = [r for r in rows if not r.same]
    said = "; ".join(d for r in differ for d in (r.differences or [f"{r.level}: {', '.join(r.rules)}"]))
    return (0.0 if differ else 1.0), (said[:400] if differ else "same")


def _figure(p: Any, name: str, gate: Any) -> tuple[float | None, str]:
    if gate.metric == "nodes_taken_share":
        art = p.artifacts.get(name)
        if art is None or not art.nodes_total:
            return None, "no node count on this platform"
        return art.nodes_taken / art.nodes_total, f"{art.nodes_taken} of {art.nodes_total}"
    art = p.artifacts.get(name)
    if p.kind in ("qnn", "openvino"):
        if art is None or art.status != "ok":
            return None, "did not compile: " + ((art.fallback or art.error or "") if art else "not run")[:300]
        numerics = art.numerics
    else:
        ol = p.optimized.get(name, {}).get(gate.level)
        numerics = ol.numerics if ol is not None else None
    if numerics is None or gate.metric not in _NUMERIC:
        return None, f"no {gate.metric} on this platform (is platform_accuracy enabled, depth not structure?)"
    value = getattr(numerics, _NUMERIC[gate.metric])
    if value is None and gate.metric == "sqnr_db":
        return math.inf, "exact"
    return (None, f"{gate.metric} not recorded") if value is None else (float(value), f"{float(value):.4g}")


def _compare(actual: float, op: str, value: float) -> bool:
    return {">=": actual >= value, ">": actual > value, "<=": actual <= value, "<": actual < value,
            "==": actual == value}[op]


def target_gate_result(report: Any, gate: Any, label: str) -> GateResult:
    p = (getattr(report, "platforms", None) or {}).get(gate.platform)
    if p is None:
        return GateResult(gate=label, passed=False, message=f"{gate.platform} did not run: add it to options.platforms")
    if p.status != "ok":
        return GateResult(gate=label, passed=False, message=f"{gate.platform} unavailable: {p.error.code}: {p.error.message}")
    if gate.relative_to:
        return GateResult(gate=label, passed=False, message="a gate on a platform cannot be relative to a baseline")
    names = _names(report, gate)
    read = {"compiles": _compiles, "same_graphs": _same_graphs}.get(gate.metric)
    got = {n: (read(p, n) if read else _figure(p, n, gate)) for n in names}
    missing = [f"{n}: {why}" for n, (v, why) in got.items() if v is None]
    values = {n: v for n, (v, _) in got.items() if v is not None}
    if gate.metric in TARGET_FLAG_METRICS:
        share = sum(values.values()) / len(names) if names else 0.0
        failing = [f"{n}: {got[n][1]}" for n, v in values.items() if v < 1.0]
        return GateResult(gate=label, passed=not missing and _compare(share, gate.op, gate.value), actual=share,
                          message="; ".join(failing + missing) or f"all {len(names)} on {gate.platform}: {', '.join(names)}")
    failing = [n for n, v in values.items() if not _compare(v, gate.op, gate.value)]
    worst = min(values.values(), default=None) if gate.op in (">=", ">") else max(values.values(), default=None)
    shown = ", ".join(f"{n} {got[n][1]}" for n in values)
    parts = [f"{', '.join(f'{n} {got[n][1]}' for n in failing)} not {gate.op} {gate.value:g}"] if failing else []
    return GateResult(gate=label, passed=not failing and not missing, message="; ".join(parts + missing) or
                      f"{shown} {gate.op} {gate.value:g} on {gate.platform}",
                      actual=None if worst is None or math.isinf(worst) else worst)
