"""The CI gate syntax, parsed on the client so ``check`` can refuse a typo before uploading.

The server owns the semantics (``service/pipeline/verdict/gates.py`` evaluates them into the verdict);
this is a copy of its parser because the client must not import the service. Keep the two in
step: ``tests/clients`` compares them on the same inputs.

    [artifact.][level.]metric[op value]     e.g.  ort_qdq.all.sqnr_db>=25   status_ok
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict

__all__ = ["ARTIFACTS", "LEVELS", "METRICS", "GateSyntaxError", "parse_gate", "format_gate"]

ARTIFACTS = ("pt2e_qdq", "ort_qdq", "ort_qoperator")
LEVELS = ("disable_all", "basic", "extended", "layout", "all")
METRICS = ("sqnr_db", "cosine", "max_abs_error", "int8_coverage", "latency_ratio", "status_ok")
_GATE_RE = re.compile(r"^\s*(?P<lhs>[A-Za-z0-9_.*]+)\s*(?:(?P<op>>=|<=|==|>|<)\s*(?P<value>\S+))?\s*$")
SYNTAX_HINT = (
    "write gates as [artifact.][level.]metric op value, e.g. 'ort_qdq.all.sqnr_db>=25', "
    "'*.all.int8_coverage>=0.9', 'pt2e_qdq.all.latency_ratio<=1.2' or 'status_ok'"
)


class GateSyntaxError(ValueError):
    """A gate string that is not in the gate syntax; ``hint`` shows the syntax."""

    hint = SYNTAX_HINT


def parse_gate(text: str) -> Dict[str, Any]:
    """``"ort_qdq.all.sqnr_db>=25"`` -> the ``options.gates`` entry the server expects."""
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
        if part in ARTIFACTS or part == "*":
            key = "artifact"
        elif part in LEVELS:
            key = "level"
        else:
            raise GateSyntaxError(
                f"gate {text!r}: {part!r} is neither an artifact ({', '.join(ARTIFACTS)}, *) "
                f"nor a level ({', '.join(LEVELS)})"
            )
        if key in seen:
            raise GateSyntaxError(f"gate {text!r}: {key} given twice")
        seen.add(key)
        gate[key] = part
    if len(parts) == 3 and parts[0] in LEVELS:
        raise GateSyntaxError(f"gate {text!r}: write artifact before level")
    if m["op"]:
        try:
            value = float(m["value"])
        except ValueError:
            raise GateSyntaxError(f"gate {text!r}: {m['value']!r} is not a number") from None
        if math.isnan(value):
            raise GateSyntaxError(f"gate {text!r}: the threshold is NaN")
        gate["op"], gate["value"] = m["op"], value
    elif metric != "status_ok":
        raise GateSyntaxError(f"gate {text!r}: a threshold is missing (e.g. {text}>=25)")
    return gate


def format_gate(gate: Dict[str, Any]) -> str:
    """The inverse of :func:`parse_gate` (the form the server's ``GateResult.gate`` uses)."""
    artifact, level = gate.get("artifact", "*"), gate.get("level", "all")
    op, value = gate.get("op", ">="), float(gate.get("value", 1.0))
    if gate["metric"] == "status_ok":
        head = "status_ok" if artifact == "*" else f"{artifact}.status_ok"
        return head if (op, value) == (">=", 1.0) else f"{head}{op}{value:.6g}"
    return f"{artifact}.{level}.{gate['metric']}{op}{value:.6g}"
