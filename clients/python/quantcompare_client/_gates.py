"""The CI gate syntax, parsed on the client so ``check`` can refuse a typo before uploading.

The server owns the semantics (``service/pipeline/verdict/gates.py`` evaluates them into the verdict);
this is a copy of its parser because the client must not import the service. Keep the two in
step: ``tests/clients`` compares them on the same inputs.

    [artifact.][level.]metric[op value]     e.g.  ort_qdq.all.sqnr_db>=25   status_ok
    value: a number, or baseline[+-number]    e.g.  ort_qdq.all.sqnr_db>=baseline-0.5

A relative gate needs the baseline's figures: :func:`baseline_values_from_report` reads them from
a saved report.json (``check --baseline``), or the server reads them from ``options.baseline``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Optional

__all__ = ["ARTIFACTS", "LEVELS", "METRICS", "GateSyntaxError", "parse_gate", "format_gate",
           "baseline_values_from_report", "figure_from_report", "depth_for_gates", "options_for_gates"]

# The built-in paths; a gate may also name a brought file (artifact.<name>) by its name.
ARTIFACTS = ("pt2e_qdq", "ort_qdq", "ort_qoperator", "nncf_qdq", "modelopt_qdq", "quark_qdq")
_ARTIFACT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
LEVELS = ("disable_all", "basic", "extended", "layout", "all")
METRICS = ("sqnr_db", "cosine", "max_abs_error", "mismatch_share", "angular_error", "argmax_agreement", "int8_coverage",
           "latency_ratio", "status_ok", "calibration_data_uploaded")
_FLAG_METRICS = ("status_ok", "calibration_data_uploaded")
_GATE_RE = re.compile(r"^\s*(?P<lhs>[A-Za-z0-9_.*]+)\s*(?:(?P<op>>=|<=|==|>|<)\s*(?P<value>\S+))?\s*$")
_BASELINE_RE = re.compile(r"^baseline(?:(?P<offset>[+-][^+-].*))?$")
SYNTAX_HINT = (
    "write gates as [artifact.][level.]metric op value, e.g. 'ort_qdq.all.sqnr_db>=25', "
    "'*.all.int8_coverage>=0.9', '*.all.mismatch_share<=0.01', 'pt2e_qdq.all.latency_ratio<=1.2', 'status_ok' "
    "or 'calibration_data_uploaded'"
)


# What each metric needs the server to measure (the server's options.ACCURACY_METRICS): the others read
# the files and the level graphs, which depth "structure" has.
_ACCURACY_METRICS = ("sqnr_db", "cosine", "max_abs_error", "mismatch_share", "angular_error", "argmax_agreement")


def depth_for_gates(gates: Any) -> Optional[str]:
    """The depth the gates need: "structure" when every gate reads the files and level graphs only
    (int8_coverage, status_ok, calibration_data_uploaded), "standard" when one reads accuracy or latency,
    None without gates (the server's default)."""
    metrics = [g.get("metric") for g in gates or [] if isinstance(g, dict)]
    if not metrics:
        return None
    return "standard" if any(m in _ACCURACY_METRICS or m == "latency_ratio" for m in metrics) else "structure"


def options_for_gates(options: Dict[str, Any]) -> Dict[str, Any]:
    """``options`` asking for what its gates need, and no more (``check``): the depth they need unless the
    options set one, and each level a latency_ratio gate reads among ``latency_levels``."""
    out = dict(options)
    gates = [g for g in out.get("gates") or [] if isinstance(g, dict)]
    depth = depth_for_gates(gates)
    if depth is not None and "depth" not in out:
        out["depth"] = depth
    timed = [g.get("level", "all") for g in gates if g.get("metric") == "latency_ratio"]
    if timed and out.get("depth") != "full":
        levels = out.get("levels")
        current = list(out.get("latency_levels") or
                       ["all" if not levels or "all" in levels else [lv for lv in LEVELS if lv in levels][-1]])
        out["latency_levels"] = current + [lv for lv in dict.fromkeys(timed) if lv not in current]
    return out


class GateSyntaxError(ValueError):
    """A gate string that is not in the gate syntax; ``hint`` shows the syntax."""

    hint = SYNTAX_HINT


# A target or platform in front ("qnn:69.ort_qdq.compiles"): the server's target_gates.py, kept in step.
_PLATFORM_RE = re.compile(r"^\s*(?P<platform>qnn(?::[0-9]{1,4})?|openvino:cpu|ort:[0-9]+\.[0-9]+\.[0-9]+"
                          r"|arm64(?::[a-z0-9-]+)?)\.(?P<rest>.+)$")
TARGET_FLAG_METRICS = ("compiles", "same_graphs")
TARGET_METRICS = (*TARGET_FLAG_METRICS, "nodes_taken_share")


def parse_gate(text: str) -> Dict[str, Any]:
    """``"ort_qdq.all.sqnr_db>=25"`` -> the ``options.gates`` entry the server expects; with a platform in front
    (``"qnn:69.ort_qdq.compiles"``, ``"ort:1.22.1.same_graphs"``) the gate reads ``platforms.<platform>``."""
    m = _PLATFORM_RE.match(text or "")
    if m:
        rest = m["rest"]
        metric = rest.split(">")[0].split("<")[0].split("=")[0].split(".")[-1].strip()
        if metric in TARGET_FLAG_METRICS:
            gate = _parse_plain(rest.replace(metric, "status_ok", 1), text)
            gate["metric"] = metric
        elif metric == "nodes_taken_share":
            gate = _parse_plain(rest.replace(metric, "int8_coverage", 1), text)
            gate["metric"] = metric
        else:
            gate = _parse_plain(rest, text)
        gate["platform"] = m["platform"]
        return gate
    return _parse_plain(text, text)


def _parse_plain(text: str, whole: str) -> Dict[str, Any]:
    m = _GATE_RE.match(text or "")
    if not m:
        raise GateSyntaxError(f"gate {text!r} is not in the gate syntax")
    parts = m["lhs"].split(".")
    metric = parts[-1]
    if metric not in METRICS:
        raise GateSyntaxError(f"gate {text!r}: unknown metric {metric!r} (one of {', '.join(METRICS)})")
    if len(parts) > 3:
        raise GateSyntaxError(f"gate {text!r}: too many dotted parts")
    gate: Dict[str, Any] = {"artifact": "*", "level": "all", "metric": metric, "op": ">=", "value": 1.0}
    seen = set()
    for part in parts[:-1]:
        if part in LEVELS:
            key = "level"
        elif part == "*" or _ARTIFACT_NAME.match(part):
            key = "artifact"
        else:
            raise GateSyntaxError(
                f"gate {text!r}: {part!r} is neither an artifact ({', '.join(ARTIFACTS)}, a brought file's name, *) "
                f"nor a level ({', '.join(LEVELS)})"
            )
        if key in seen:
            raise GateSyntaxError(f"gate {text!r}: {key} given twice")
        seen.add(key)
        gate[key] = part
    if metric == "calibration_data_uploaded" and len(parts) > 1:
        raise GateSyntaxError(f"gate {text!r}: calibration_data_uploaded is about the whole report; "
                              "write it without artifact or level")
    if len(parts) == 3 and parts[0] in LEVELS:
        raise GateSyntaxError(f"gate {text!r}: write artifact before level")
    if m["op"]:
        raw = m["value"]
        relative = _BASELINE_RE.match(raw)
        if relative:
            if metric == "status_ok":
                raise GateSyntaxError(f"gate {text!r}: status_ok cannot be relative to a baseline")
            gate["relative_to"] = "baseline"
            raw = relative["offset"] or "0"
        try:
            value = float(raw)
        except ValueError:
            raise GateSyntaxError(f"gate {text!r}: {m['value']!r} is neither a number nor baseline[+-number]") from None
        if not math.isfinite(value):
            raise GateSyntaxError(f"gate {text!r}: the threshold is not a finite number")
        gate["op"], gate["value"] = m["op"], value
    elif metric not in _FLAG_METRICS:
        raise GateSyntaxError(f"gate {text!r}: a threshold is missing (e.g. {text}>=25)")
    return gate


def format_gate(gate: Dict[str, Any]) -> str:
    """The inverse of :func:`parse_gate` (the form the server's ``GateResult.gate`` uses)."""
    if gate.get("platform"):
        plain = {k: v for k, v in gate.items() if k != "platform"}
        flag = plain["metric"] in TARGET_FLAG_METRICS
        inner = format_gate({**plain, "metric": "status_ok"}).replace("status_ok", plain["metric"], 1) if flag \
            else format_gate({**plain, "metric": "sqnr_db"}).replace("sqnr_db", plain["metric"], 1)
        if not gate["platform"].startswith(("ort:", "arm64")):
            inner = inner.replace(f".{gate.get('level', 'all')}.", ".", 1)
        return f"{gate['platform']}.{inner}"
    artifact, level = gate.get("artifact", "*"), gate.get("level", "all")
    op, value = gate.get("op", ">="), float(gate.get("value", 1.0))
    if gate["metric"] in _FLAG_METRICS:
        head = gate["metric"] if artifact == "*" else f"{artifact}.{gate['metric']}"
        return head if (op, value) == (">=", 1.0) else f"{head}{op}{value:.6g}"
    if gate.get("relative_to") == "baseline":
        return f"{artifact}.{level}.{gate['metric']}{op}" + ("baseline" if value == 0 else f"baseline{value:+.6g}")
    return f"{artifact}.{level}.{gate['metric']}{op}{value:.6g}"


_MISSING = object()


def figure_from_report(report: Any, artifact: str, level: str, metric: str) -> Any:
    """One gate figure of a :class:`Report`, as the server's gates read it.

    Returns the number, ``None`` for an exact match (``sqnr_db`` without error), or
    ``figure_from_report.MISSING`` when the report lacks it (path failed, level not run, no latency).
    """
    art = report.artifacts.get(artifact)
    if art is None or art.status != "ok":
        return _MISSING
    lv = art.optimized.get(level)
    if lv is None:
        return _MISSING
    if metric in ("angular_error", "argmax_agreement"):  # outputs SQNR cannot judge: read from the raw numerics
        value = (lv.numerics.raw.get(f"worst_{metric}") if lv.numerics is not None else None)
        return _MISSING if value is None else float(value)
    if metric in ("sqnr_db", "cosine", "max_abs_error", "mismatch_share"):
        if lv.numerics is None:
            return _MISSING
        value = getattr(lv.numerics, f"worst_{metric}")  # the client reads an exact SQNR (null) as inf
        if value is None:
            return _MISSING
        return None if metric == "sqnr_db" and math.isinf(value) else value
    if metric == "int8_coverage":
        return _MISSING if lv.int8_coverage is None else lv.int8_coverage
    if metric == "latency_ratio":
        ratio = report.latency_ratio(artifact, level)
        return _MISSING if ratio is None else ratio
    return _MISSING


figure_from_report.MISSING = _MISSING  # type: ignore[attr-defined]


def baseline_values_from_report(baseline: Any, gate: Dict[str, Any]) -> Dict[str, Optional[float]]:
    """``Gate.baseline_values`` for a relative ``gate``: its figure per artifact in ``baseline``.

    Artifacts whose figure the baseline lacks are left out; the server then fails the gate for
    them with a message saying the baseline has no such figure.
    """
    names = [a for a in baseline.artifacts if a != "fp32"] if gate.get("artifact", "*") == "*" else [gate["artifact"]]
    out: Dict[str, Optional[float]] = {}
    for name in names:
        value = figure_from_report(baseline, name, gate.get("level", "all"), gate["metric"])
        if value is not _MISSING:
            out[name] = value
    return out
