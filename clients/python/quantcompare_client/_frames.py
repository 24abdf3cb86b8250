"""``Report.to_pandas(kind)``: the report's tables as DataFrames (pandas is the optional extra).

Rows are built as plain dicts first (:func:`rows_for`), so the shape of every table is decided
here without pandas; only :func:`frame_from_report` imports it, on first use.

    levels     one row per artifact x level: status, nodes, int8 coverage, SQNR, cosine,
               max abs error, median / p90 ms, latency ratio vs fp32, the level's error
    decisions  one row per decision ("bias quantized to int32"), one column per artifact
    gates      one row per gate of the verdict: passed, actual, baseline, delta, message
    layers     one row per fp32 tensor x artifact (the report's per-tensor ``layers`` table);
               an artifact the server left out of a row has its reason in ``left_out``

An exact match (no error) has ``sqnr_db`` ``inf`` in every table, where the JSON has ``null``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List

__all__ = ["KINDS", "rows_for", "frame_from_report"]

KINDS = ("levels", "decisions", "gates", "layers")
_LAYER_FIGURES = ("sqnr_db", "cosine", "max_abs_error", "max_abs_error_lsb", "clipped_share", "scale", "zero_point",
                  "drop_db")


def _levels(report: Any) -> List[Dict[str, Any]]:
    rows = []
    for name, art in report.artifacts.items():
        levels = list(art.optimized) or [None]
        for level in levels:
            lv = art.optimized.get(level) if level else None
            num, lat = (lv.numerics if lv else None), (lv.latency if lv else None)
            rows.append({
                "artifact": name, "level": level, "status": art.status,
                "nodes": lv.node_count if lv else None,
                "int8_coverage": lv.int8_coverage if lv else None,
                "sqnr_db": num.worst_sqnr_db if num else None,
                "cosine": num.worst_cosine if num else None,
                "max_abs_error": num.worst_max_abs_error if num else None,
                "median_ms": lat.median_ms if lat else None,
                "p90_ms": lat.p90_ms if lat else None,
                "latency_ratio": report.latency_ratio(name, level) if lv and name != "fp32" else None,
                "error": (lv.error if lv else None) or (str(art.error) if art.error else None),
            })
    return rows


def _decisions(report: Any) -> List[Dict[str, Any]]:
    names = [n for n in report.artifacts if n != "fp32"]
    return [{"decision": d.decision, **{n: d.where.get(n) for n in names}} for d in report.decisions]


def _gates(report: Any) -> List[Dict[str, Any]]:
    return [{"gate": g.gate, "passed": g.passed, "actual": g.actual, "baseline": g.baseline, "delta": g.delta,
             "message": g.message} for g in report.verdict.gates]


def _layers(report: Any) -> List[Dict[str, Any]]:
    layers = report.raw.get("layers")
    if layers is None:
        raise ValueError("this report has no per-tensor 'layers' table: the server that made it did not record one "
                         "(ask for it in the options if the server supports it)")
    rows_in = layers.get("rows") if isinstance(layers, dict) else layers
    rows = []
    for row in rows_in or []:
        if not isinstance(row, dict):
            continue
        head = {"tensor": row.get("tensor"), "op_type": row.get("op_type")}
        for key in ("node", "depth"):
            if key in row:
                head[key] = row[key]
        cells = row.get("artifacts") if isinstance(row.get("artifacts"), dict) else {}
        left_out = row.get("left_out") if isinstance(row.get("left_out"), dict) else {}
        for artifact, cell in cells.items():
            cell = cell if isinstance(cell, dict) else {}
            figures = {k: cell.get(k) for k in _LAYER_FIGURES}
            if "sqnr_db" in cell and cell["sqnr_db"] is None:
                figures["sqnr_db"] = math.inf  # the server's null: identical to fp32, as in the levels table
            rows.append({**head, "artifact": artifact, **figures, "left_out": None})
        for artifact, why in left_out.items():
            if artifact not in cells:
                rows.append({**head, "artifact": artifact, **{k: None for k in _LAYER_FIGURES}, "left_out": str(why)})
    return rows


_BUILDERS = {"levels": _levels, "decisions": _decisions, "gates": _gates, "layers": _layers}


def rows_for(report: Any, kind: str) -> List[Dict[str, Any]]:
    if kind not in _BUILDERS:
        raise ValueError(f"unknown table {kind!r}: one of {', '.join(KINDS)}")
    return _BUILDERS[kind](report)


def frame_from_report(report: Any, kind: str) -> Any:
    rows = rows_for(report, kind)
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("Report.to_pandas needs pandas: pip install 'quantcompare-client[pandas]'") from None
    columns = {"levels": ["artifact", "level", "status", "nodes", "int8_coverage", "sqnr_db", "cosine", "max_abs_error",
                          "median_ms", "p90_ms", "latency_ratio", "error"],
               "gates": ["gate", "passed", "actual", "baseline", "delta", "message"]}.get(kind)
    frame = pd.DataFrame(rows, columns=columns) if columns and not rows else pd.DataFrame(rows)
    if kind == "decisions" and not frame.empty:
        frame = frame.set_index("decision")
    return frame
