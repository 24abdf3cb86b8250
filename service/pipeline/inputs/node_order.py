"""Nodes written in topological order, before any path reads the upload.

ONNX requires a graph's nodes in topological order and onnx's checker refuses a file without it,
but ONNX Runtime sorts the nodes itself when it loads a graph (``Graph::Resolve`` builds its own
order), so such a file runs. Exporters write it: onnxruntime.transformers.float16's
``convert_float_to_float16(keep_io_types=True)`` appends the Cast of each graph input after the
nodes that read it. onnx's shape inference, ORT's quantizer and the ONNX -> torch converter walk the
node list in order, so the file every path reads is the sorted one."""

from __future__ import annotations

import heapq

from service.pipeline.vocabulary import node_reads, subgraphs


def topological_order(deps: list[set[int]]) -> list[int] | None:
    """Node indices, each after the nodes its ``deps`` names (the producers of what it reads), the
    earliest free node first, so an order that is already valid comes back unchanged; None when
    some nodes wait on each other (a cycle). The submit checks and ``sort_nodes`` share it."""
    waiting = [len(d) for d in deps]
    readers: list[list[int]] = [[] for _ in deps]
    for k, d in enumerate(deps):
        for p in d:
            readers[p].append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]  # a heap: the earliest free node goes first
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for r in readers[k]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    return order if len(order) == len(deps) else None


def sort_nodes(graph, outer: frozenset[str] = frozenset()) -> int:
    """Reorder ``graph``'s nodes (and its bodies') topologically, in place, keeping the upload's order
    among nodes that are free to go; how many nodes moved. A graph that cannot be sorted (a cycle)
    is left as it is: the submit checks refuse it with their own message."""
    nodes = list(graph.node)
    known = set(outer) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[name] for name in node_reads(n) if name in producer and name not in known} for n in nodes]
    order = topological_order(deps)
    moved = 0
    if order is not None and order != sorted(order):
        moved = sum(1 for pos, k in enumerate(order) if pos != k)
        del graph.node[:]
        graph.node.extend(nodes[k] for k in order)
    scope = frozenset(known | set(producer))
    for n in graph.node:
        for body in subgraphs(n):
            moved += sort_nodes(body, scope)
    return moved
