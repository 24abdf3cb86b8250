"""Which of a model's imported operator domains its nodes actually use.

Exporters import domains no node uses (``ai.onnx.training``, ``com.microsoft.experimental``, a
framework's own domain). ORT loads such a file and runs it; the report names them so a reader
knows why the import list is longer than the op list.
"""

from __future__ import annotations

from service.pipeline.vocabulary import is_onnx_domain, onnx_domain_name


def _graph_domains(graph, out: set[str]) -> None:
    from onnx import AttributeProto

    for node in graph.node:
        out.add(node.domain or "")
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                _graph_domains(a.g, out)
            elif a.type == AttributeProto.GRAPHS:
                for g in a.graphs:
                    _graph_domains(g, out)


def domains_used_by_nodes(model) -> set[str]:
    """Domains of every node: main graph, subgraphs at any depth, and model-local function bodies.
    A function's own domain counts as used only when a node calls it."""
    used: set[str] = set()
    _graph_domains(model.graph, used)
    for fn in model.functions:
        _graph_domains(fn, used)  # a FunctionProto has .node like a graph
    return {onnx_domain_name(d) for d in used}


def unused_opset_imports(model) -> list[str]:
    """Imported domains (``ai.onnx`` aside) that no node uses, sorted."""
    used = domains_used_by_nodes(model)
    declared = {imp.domain for imp in model.opset_import}
    return sorted(d for d in declared if not is_onnx_domain(d) and d not in used)


def unused_domains_note(model) -> str | None:
    unused = unused_opset_imports(model)
    if not unused:
        return None
    return (f"opset_import lists domains no node uses: {', '.join(unused)}; they are not needed to run the model "
            "(ORT loads them as declared), and quantcompare checks only the domains nodes use")
