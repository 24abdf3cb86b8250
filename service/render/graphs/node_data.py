"""Model Explorer node data for one level graph: per node, int8 kernel / float with its blocker / Q/DQ, and the
per-tensor SQNR with its interval where the table has it.

The format is Model Explorer's ``GraphNodeData`` (``model_explorer/node_data_builder.py`` in the
``ai-edge-model-explorer`` package): ``{"name", "results": {key: {"value", "bgColor"}}, ...}``, where a key is
one of the node's output tensor names (matched against ``outputsMetadata.tensor_name``, which the ONNX adapter
sets to the ONNX value name) and ``value`` a number or a string (the web app shows a string as it is). Load the
level graph (``<artifact>.<level>.onnx``) in Model Explorer, then this file.
"""

from __future__ import annotations

from service.render.graphs.view import KINDS, node_kind, tensor_sqnr_index

__all__ = ["node_data_from_report", "NODE_DATA_SUFFIX"]

NODE_DATA_SUFFIX = ".node_data.json"
_WORD = {"int8": "int8 kernel", "float": "float", "qdq": "Q/DQ", "other": "as written"}


def node_data_from_report(report: dict, artifact: str, level: str) -> dict | None:
    """The node data of ``artifact`` at ``level`` (the report's JSON), or None when the report has no such graph."""
    lv = (((report.get("artifacts") or {}).get(artifact) or {}).get("optimized") or {}).get(level)
    if not lv or not lv.get("nodes"):
        return None
    blocked = {u.get("node"): u for u in lv.get("unfused") or []}
    sqnr = tensor_sqnr_index(report.get("layers"), artifact)
    results: dict[str, dict] = {}
    for n in lv["nodes"]:
        kind = node_kind(n, blocked)
        value = _WORD[kind] + (f": {blocked[n['name']].get('blocker')}" if kind == "float" else "")
        for t in n.get("outputs") or []:
            if not t:
                continue
            cell = sqnr.get(t) or sqnr.get(t.removesuffix("_quantized"))
            text = value
            if cell and cell.get("sqnr_db") is not None:
                ci = cell.get("ci") or []
                text += f", SQNR {cell['sqnr_db']:.1f} dB" + (
                    f" [{ci[0]:.1f}, {ci[1]:.1f}]" if len(ci) == 2 and None not in ci else "")
            results[t] = {"value": text, "bgColor": KINDS[kind][0], "textColor": KINDS[kind][1]}
    return {"name": f"quantcompare {artifact} at {level}", "results": results,
            "showExpandedSummaryOnGroupNode": True, "showLabelCountColumnsInChildrenStatsTable": True}
