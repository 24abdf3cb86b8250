"""Float weights and quantization scales a file stores as NaN or inf, and NaN or inf the graph builds
from its own constants.

A quantizer that meets NaN or inf on the calibration samples (NonFiniteCalibration) cannot tell
whether the samples drove the model there, the file stores it, or the graph computes it from
constants and shapes alone (a fill value ``ConstantOfShape(value=NaN)`` that a ``Where`` selects);
the fix differs (other samples, another export, leaving the reading op type out of quantization), so
the job looks once, only when a path failed that way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from service.pipeline.inputs.output_shapes import selection_origins
from service.pipeline.vocabulary import (
    QDQ_OPS, QLINEAR_OPERANDS, QUANTIZE, RANDOM_OPS, SHAPE_READING_OPS, is_onnx_domain, node_reads, op_key,
)


def nonfinite_weights(model, base_dir: Path) -> list[tuple[str, int, int]]:
    """(initializer or Constant output, non-finite values, values) for each float tensor of the main
    graph holding NaN or inf, in file order; external data read from ``base_dir``."""
    import onnx
    from onnx import numpy_helper

    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], a.t) for n in model.graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value" and a.HasField("t")]
    found = []
    for name, t in tensors:
        if t.data_type not in floats:
            continue
        try:
            values = numpy_helper.to_array(t, base_dir=str(base_dir))
        except Exception:  # noqa: BLE001 - unreadable here: the quantizer's own message stands
            continue
        bad = int(values.size - np.count_nonzero(np.isfinite(values.astype(np.float64))))
        if bad:
            found.append((name, bad, int(values.size)))
    return found


def selected_by_where(model, tensor: str) -> tuple[list[str], list[str], bool] | None:
    """Where ``tensor`` (a stored -inf, a masked fill) is read only as a value of Where nodes, so a
    condition decides whether it reaches anything: (those Where nodes, the graph inputs their
    conditions are computed from, whether a false condition keeps it out everywhere: it is each
    Where's X, taken where the condition holds); None when some node reads it otherwise."""
    graph = model.graph
    readers = [n for n in graph.node if tensor in n.input]
    if not readers or any(n.op_type != "Where" or list(n.input).index(tensor) == 0 for n in readers):
        return None
    producers = {o: n for n in graph.node for o in n.output}
    inputs = {vi.name for vi in graph.input} - {t.name for t in graph.initializer}
    found, todo, seen = [], [n.input[0] for n in readers], set()
    while todo:  # the graph inputs upstream of the conditions
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in inputs:
            found.append(t)
        elif t in producers:
            todo.extend(i for i in producers[t].input if i)
    return ([n.name or "(unnamed)" for n in readers], sorted(found),
            all(list(n.input).index(tensor) == 1 for n in readers))


def made_without_samples(model, tensor: str) -> list[str] | None:
    """The nodes that compute ``tensor`` (main graph, in graph order, "<op> '<name>'") when no value of
    any graph input reaches it: it is built from initializers, Constant nodes and the shapes of
    tensors whose shape no selection moves, so every sample gives it the same value. None when a
    graph input's values reach it (the samples decide it), when a node upstream draws random numbers
    or reads a selection's shape, or when ``tensor`` is a graph input itself."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output if o}
    inputs = {vi.name for vi in graph.input} - {t.name for t in graph.initializer}
    if tensor in inputs:
        return None
    moving = selection_origins(graph)[0]  # tensors whose shape may move with the values
    made, todo, seen = [], [tensor], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in inputs:
            return None
        node = producers.get(t)
        if node is None:
            continue  # an initializer (or a Constant's tensor): the same value for every sample
        if node.op_type in RANDOM_OPS:
            return None
        made.append(node)
        # a Shape/Size reads its input's shape only: with the job's input shapes fixed, the same on every
        # sample (unless a selection upstream makes the shape move)
        if node.op_type in SHAPE_READING_OPS and is_onnx_domain(node.domain):
            if node.input and node.input[0] in moving:
                return None  # the shape of a selection's rows: the samples decide it
            continue
        todo.extend(node_reads(node))
    order = {id(n): i for i, n in enumerate(graph.node)}
    return [f"{n.op_type} '{n.name or n.output[0]}'" for n in sorted(made, key=lambda n: order[id(n)])]


def nonfinite_scales(graph) -> list[tuple[str, str]]:
    """(tensor, node) for each quantization scale a quantized file stores as NaN or inf, in node order:
    the input of a QuantizeLinear, the output of a DequantizeLinear, each operand of a QLinear*
    kernel (``vocabulary.QLINEAR_OPERANDS``). quantize_static writes such a scale without complaint
    when a calibration range holds inf (an attention mask filled with -inf: ``compute_scale_zp``
    divides an infinite range), and every value through it dequantizes to garbage. ``graph``: a
    ``vocabulary.GraphIndex``."""
    found = []
    for node in graph.nodes:
        key = op_key(node)
        if key in QDQ_OPS:
            operands = ((0 if key == QUANTIZE else -1, 1),)
        else:
            operands = tuple((d, s) for d, s, _ in QLINEAR_OPERANDS.get(key, ()))
        for data, scale in operands:
            if len(node.input) <= scale or not node.input[scale]:
                continue
            value = graph.init_array(node.input[scale])
            if value is not None and value.dtype.kind == "f" and not np.isfinite(value).all():
                found.append((node.output[0] if data == -1 else node.input[data], node.name))
    return found
