"""Graphs that make the installed ONNX Runtime abort the whole process while it optimizes them,
found before a session is made, so one level fails with the reason instead of the job (or the CLI)
dying with a C++ assertion.

QDQPropagationTransformer (level basic and up; onnxruntime/core/optimizer/qdq_transformer/
qdq_propagation.cc, ORT 1.32) carries a DequantizeLinear forward through Reshape, Transpose,
Squeeze, Unsqueeze, Slice and MaxPool-12, inserting a Q/DQ pair on every edge after each such op.
``InsertQDQPairs`` rewires each edge's reader with ``dst_node->MutableInputDefs()[arg_idx]``. An
If/Loop/Scan whose body reads the tensor from the outer graph is a reader through an *implicit*
input, whose edge index counts past its explicit inputs: the index is out of range, and ORT's
build asserts (``stl_vector.h: Assertion '__n < this->size()' failed``, SIGABRT). Level 1 runs
EliminateIdentity and EnsureUniqueDQForNodeUnit (one DQ per reader) before it, so an Identity in
between or a DQ with several readers does not stop it. A PT2E file hits it whenever a dequantized
tensor goes through a reshape into a Loop body (a detector's per-class NMS); so does ORT's own
QOperator file of such a graph.
"""

from __future__ import annotations

from service.pipeline.vocabulary import DEQUANTIZE, MS, QUANTIZE, ai_onnx_opset, is_onnx_domain, node_reads, subgraphs

# CanNodePropagate() in qdq_propagation.cc: op -> the since-versions it accepts (ai.onnx).
PROPAGATING_OPS = {"MaxPool": {12}, "Reshape": {5, 13, 14, 19}, "Transpose": {1, 13},
                   "Squeeze": {1, 11, 13}, "Unsqueeze": {1, 11, 13}, "Slice": {1, 10, 11, 13}}
ABORT_SOURCE = "qdq_propagation.cc, InsertQDQPairs and GetNextPropagationEdges"  # under onnxruntime/core/optimizer/qdq_transformer


def _since(op: str, opset: int) -> int | None:
    from onnx import defs

    try:
        return defs.get_schema(op, opset, "").since_version
    except Exception:  # noqa: BLE001 - an op onnx does not know: ORT's check fails too
        return None


def _is_dq(node) -> bool:
    return node.op_type == DEQUANTIZE and (is_onnx_domain(node.domain) or node.domain == MS)


def _constant_scalar(name: str, initializers: dict) -> bool:
    t = initializers.get(name)
    return t is not None and len(t.dims) <= 1 and all(d == 1 for d in t.dims)


def qdq_propagation_abort(model) -> str | None:
    """The tensor at which QDQPropagationTransformer would abort ORT on ``model`` (read through an
    If/Loop/Scan body after a DequantizeLinear and ops it propagates through), or None."""
    opset = ai_onnx_opset(model, 0)
    return _abort_in(model.graph, opset, {})


def _abort_in(graph, opset: int, outer_initializers: dict) -> str | None:
    initializers = {**outer_initializers, **{t.name: t for t in graph.initializer}}  # a body reads outer ones
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[tuple[object, bool]]] = {}  # tensor -> (node, implicitly)
    for node in graph.node:
        for name in {i for i in node.input if i}:
            readers.setdefault(name, []).append((node, False))
        for name in node_reads(node) - set(node.input):  # what its bodies read from this graph
            readers.setdefault(name, []).append((node, True))
    propagates = {op: _since(op, opset) in versions for op, versions in PROPAGATING_OPS.items()}

    def propagating(node) -> bool:
        return is_onnx_domain(node.domain) and propagates.get(node.op_type, False)

    def readers_of(name: str, depth: int = 0) -> list[tuple[object, bool]]:
        """Readers once level 1's EliminateIdentity has removed the Identity nodes in between."""
        found = []
        for node, implicitly in readers.get(name, []):
            if (not implicitly and node.op_type == "Identity" and is_onnx_domain(node.domain)
                    and node.output[0] not in outputs and depth < 64):
                found += readers_of(node.output[0], depth + 1)
            else:
                found.append((node, implicitly))
        return found

    for dq in graph.node:
        if not _is_dq(dq) or len(dq.input) < 2 or not _constant_scalar(dq.input[1], initializers):
            continue
        if len(dq.input) > 2 and dq.input[2] and not _constant_scalar(dq.input[2], initializers):
            continue
        if dq.output[0] in outputs:  # CheckOutputEdges(dq, 1)
            continue
        # EnsureUniqueDQForNodeUnit (level 1, before propagation) gives each reader its own DQ copy:
        # every reader starts a propagation of its own.
        frontier = list(readers_of(dq.output[0]))
        seen = set()
        while frontier:
            node, implicitly = frontier.pop()
            if implicitly or not propagating(node) or id(node) in seen:
                continue
            seen.add(id(node))
            out = node.output[0]
            if out in outputs:  # GetNextEdges: an output with readers propagates no further
                continue
            for reader, through_body in readers_of(out):
                if reader.op_type == QUANTIZE and (is_onnx_domain(reader.domain) or reader.domain == MS) and not through_body:
                    continue  # edges into a QuantizeLinear are filtered out
                if through_body:
                    return out
                frontier.append((reader, False))
    for node in graph.node:
        for body in subgraphs(node):
            found = _abort_in(body, opset, initializers)
            if found:
                return found
    return None
