"""The PT2E path's graph-size refusal (``options.pt2e.max_graph_ops``): its message and hint.

Two places refuse with it: the ONNX -> torch conversion right after its build run, when the module
already calls far more ops than the cap (``EARLY_FACTOR`` times: torch.export of an unrolled 501-step
decoder took 92 of SLANet's 105 s before the exact count refused it), and ``pt2e.refuse_oversized_program``
on the exported program, the exact count.
"""

from __future__ import annotations

from collections import Counter

from service.errors import PathSkipped

__all__ = ["EARLY_FACTOR", "fixed_trip_loops", "graph_size_refusal"]

# The build run's count of kept ONNX nodes (a loop body once per step) is not the torch graph's: a
# converter may emit several ops for a node, or none (Identity). Only a count this many times the cap
# refuses before torch.export; below it the exact count on the exported program decides.
EARLY_FACTOR = 2


def fixed_trip_loops(model, names: list[str]) -> list[tuple[str, int]]:
    """(name, trips) of the main-graph Loops among ``names`` whose trip count is a constant of the
    model (an initializer or a Constant node): no input shape shortens them (SLANet's 501 steps)."""
    if model is None:
        return []
    from onnx import numpy_helper

    consts = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            value = next((a.t for a in n.attribute if a.name == "value" and a.HasField("t")), None)
            if value is not None:
                consts[n.output[0]] = value
    out = []
    for n in model.graph.node:
        if n.op_type == "Loop" and n.name in names and n.input and n.input[0] in consts:
            try:
                out.append((n.name, int(numpy_helper.to_array(consts[n.input[0]]).reshape(-1)[0])))
            except Exception:  # noqa: BLE001 - an unreadable count is no fixed one
                continue
    return out


def graph_size_refusal(what: str, per_node: Counter, max_graph_ops: int, *, model=None,
                       conversion=None) -> PathSkipped:
    """The refusal: ``what`` says what was counted; ``per_node``: (op type, name) of the upload's
    main-graph node -> the ops counted for it (a Loop's body counts for the Loop). A ConversionSkipped
    (``GraphTooLarge``) carrying ``conversion`` for an ONNX upload, else a PathSkipped."""
    from service.pipeline.quantize.onnx_torch.program import GraphTooLarge

    biggest = ", ".join(f"{op} {name!r} ({k} ops)" for (op, name), k in per_node.most_common(3))
    where = f"; the most from {biggest}" if biggest else ""
    message = (f"{what}, more than options.pt2e.max_graph_ops ({max_graph_ops}): "
               f"PT2E and torch.onnx.export take time in proportion to it{where}")
    recurrent = any(op in ("LSTM", "GRU", "RNN", "Loop", "Scan") for op, _ in per_node)
    hint = ("recurrences and loops are unrolled step by step: fix a shorter sequence with options.input_shapes, "
            "or upload a .pt2 that keeps nn.LSTM/nn.GRU whole; " if recurrent else "")
    fixed = fixed_trip_loops(model, [name for (op, name), _ in per_node.most_common(3) if op == "Loop"])
    if fixed:  # its trip count is the model's own constant: no input shape shortens it
        shown = ", ".join(f"{name!r} runs up to {trips} steps" for name, trips in fixed)
        hint = (f"Loop {shown} whatever the input's shape (its trip count is a constant of the model, such as a "
                "decoder's maximum length): export the model with a smaller maximum to compare it here; ")
    hint += ("raise options.pt2e.max_graph_ops to run it anyway (and QUANTCOMPARE_JOB_TIMEOUT_S with it), "
             "or compare the ORT paths only (options.artifacts); the ORT paths are unaffected")
    if conversion is not None:
        return GraphTooLarge(message, stage="convert", hint=hint, conversion=conversion)
    return PathSkipped(message, stage="quantize", hint=hint)
