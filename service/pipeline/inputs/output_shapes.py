"""Graph outputs declared without a shape (or a type), given the ones ONNX shape inference finds.

ONNX Runtime runs such a file (onnx-graphsurgeon writes one whenever a new output tensor has no
shape set), but onnx's checker refuses it ("Field 'shape' of 'type' is required"), and an output
without a shape has no rank to report. Shape inference derives what the graph computes there, so
the fp32 reference is written with those shapes (ORT computes the same values either way), the
way sparse initializers are written dense (sparse.py); a note in the report says so. An output
inference cannot type is left as it is, and the checker's refusal stands.

And outputs whose shape depends on the values the model computes (``tensors_after_selection``): a
detector ending in NonMaxSuppression lists the boxes it kept, and an int8 file keeps other boxes
than fp32 (a score crosses the threshold, one box suppresses another), so the two lists differ in
length or order and no element-wise figure compares them."""
from __future__ import annotations

from dataclasses import dataclass, field

from service.pipeline.vocabulary import (
    RANDOM_OPS, ROW_PICKING_OPS, SELECTION_OPS, SHAPE_READING_OPS, all_nodes, is_onnx_domain, node_reads,
    subgraphs,
)


def shapeless_outputs(model) -> list[str]:
    """Graph outputs with no tensor type or no shape."""
    return [vi.name for vi in model.graph.output
            if not vi.type.HasField("tensor_type") and vi.type.WhichOneof("value") is None
            or vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]


def outputs_given_inferred_shapes(model) -> list[str]:
    """Fill, in place, the type and shape of every shapeless graph output shape inference can give;
    the names filled. Weights are not read (external data stays unloaded)."""
    import onnx

    missing = shapeless_outputs(model)
    if not missing:
        return []
    try:
        inferred = onnx.shape_inference.infer_shapes(graph_only_copy(model), strict_mode=False)
    except Exception:  # noqa: BLE001 - nothing inferred: the checker says what is missing
        return []
    by_name = {vi.name: vi for vi in inferred.graph.output}
    filled = []
    for vi in model.graph.output:
        got = by_name.get(vi.name)
        if vi.name in missing and got is not None and got.type.HasField("tensor_type") \
                and got.type.tensor_type.HasField("shape") and got.type.tensor_type.elem_type:
            vi.type.CopyFrom(got.type)
            filled.append(vi.name)
    return filled


# Initializers up to this size keep their values for inference (a Reshape's target shape, a Slice's
# ends); larger ones are weights, whose dims are all inference reads.
_KEPT_INITIALIZER_BYTES = 1024


def graph_only_copy(model, input_shapes: dict[str, tuple[int, ...]] | None = None):
    """A copy for shape inference that holds no weight bytes (an 80 MB detector is not copied):
    initializers past ``_KEPT_INITIALIZER_BYTES`` keep their dims only. ``input_shapes``: the
    graph inputs' declared shapes replaced by these concrete ones."""
    import onnx
    from onnx import helper

    src = model.graph
    out = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    g = out.graph
    g.name = src.name
    g.node.extend(src.node)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    for vi in src.input:
        shape = (input_shapes or {}).get(vi.name)
        if shape is not None and vi.type.HasField("tensor_type"):
            g.input.append(helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, list(shape)))
        else:
            g.input.append(vi)
    for t in src.initializer:
        if t.HasField("raw_data") and len(t.raw_data) > _KEPT_INITIALIZER_BYTES or t.data_location == onnx.TensorProto.EXTERNAL:
            kept = g.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims,
                                     data_location=onnx.TensorProto.EXTERNAL)
            kept.external_data.add(key="location", value="unread")
        else:
            g.initializer.append(t)
    return out


def node_label(node, index: int) -> str:
    """How the report names a node: ``NonMaxSuppression 'nms'``, or its position when unnamed."""
    return f"{node.op_type} '{node.name}'" if node.name else f"{node.op_type} (node #{index}, unnamed)"


def body_selection(node, ops=SELECTION_OPS) -> str | None:
    """The first of ``ops`` inside ``node``'s bodies (If/Loop/Scan), searched recursively."""
    for body in subgraphs(node):
        for inner in all_nodes(body):
            if inner.op_type in ops and is_onnx_domain(inner.domain):
                return inner.op_type
    return None


def constant_tensors(graph) -> set[str]:
    """Tensors of ``graph`` that hold the same value on every run: initializers, Constant outputs,
    Shape/Size of anything (every input shape is fixed for a job), and whatever is computed from
    those alone. A selection on them (NonZero of a constant mask) has a fixed output shape, and the
    converter folds it."""
    fixed = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type in SHAPE_READING_OPS | {"Constant"} or (
                node.input and next(subgraphs(node), None) is None and node.op_type not in RANDOM_OPS
                and all(i in fixed for i in node.input if i)):
            fixed.update(o for o in node.output if o)
    return fixed


def is_selection(node, constants: set[str], ops=SELECTION_OPS) -> bool:
    """A node of ``ops`` that reads a value computed at run time."""
    return (node.op_type in ops and is_onnx_domain(node.domain)
            and not all(i in constants for i in node.input if i))


def selection_origins(graph, ops=SELECTION_OPS) -> tuple[dict[str, str], list[str]]:
    """(tensor -> the selection it follows, e.g. ``"NonMaxSuppression 'nms'"``, for every tensor of
    the main graph downstream of an ``ops`` node on a run-time value, of an If/Loop/Scan whose body
    holds one, or of a node reading such a tensor; the tensors the selections themselves read)."""
    origin: dict[str, str] = {}
    read: list[str] = []
    constants = constant_tensors(graph)
    for index, node in enumerate(graph.node):  # ONNX nodes are in topological order
        reads = node_reads(node)
        if is_selection(node, constants, ops):
            why = node_label(node, index)
        elif (inner := body_selection(node, ops)) is not None:
            why = f"{node_label(node, index)} (its body holds a {inner})"
        else:
            why = next((origin[i] for i in sorted(reads & origin.keys())), None)
            reads = set()
        read += [t for t in sorted(reads) if t not in read]
        if why:
            origin.update((o, why) for o in node.output if o)
    return origin, read


def output_positions(model, tensors) -> dict[int, str]:
    """Graph output position -> ``tensors[name]``, for the outputs among ``tensors``."""
    return {k: tensors[o.name] for k, o in enumerate(model.graph.output) if o.name in tensors}


@dataclass(frozen=True)
class AfterSelection:
    """The main graph's tensors downstream of a run-time selection, each with why."""

    moving: dict[str, str] = field(default_factory=dict)  # shape depends on the values: compared by shape
    fixed: dict[str, str] = field(default_factory=dict)  # a fixed shape (rows padded to a maximum): element-wise
    read: list[str] = field(default_factory=list)  # what the selections read (a detector's boxes, scores)


def tensors_after_selection(model, inferred) -> AfterSelection:
    """The tensors downstream of a ROW_PICKING_OPS op on a run-time value (or of an If/Loop/Scan
    whose body holds one, or that reads such a tensor from outside), split by whether ONNX shape
    inference at the job's concrete input shapes (``inferred``: safety/activations.py's
    ``inferred_at_job_shapes``, None where it failed) fixes every dim. So a NonZero whose result is
    scattered back into a fixed-shape tensor, or the 300 rows a TopK of constant k kept, are
    compared element-wise."""
    found, read = selection_origins(model.graph, ROW_PICKING_OPS)
    origin = {t: f"follows {why}" for t, why in found.items()}
    if not origin:
        return AfterSelection()
    # Only after a TopK (k rows, whatever the values): a fixed shape, inferred or not.
    fixed = set(origin) - set(selection_origins(model.graph)[0])
    if inferred is None:  # no inference: every other tensor after a selection counts as moving
        return AfterSelection(moving={t: why for t, why in origin.items() if t not in fixed},
                              fixed={t: why for t, why in origin.items() if t in fixed}, read=read)
    fixed |= {vi.name for vi in (*inferred.graph.value_info, *inferred.graph.output)
              if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
              and all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
    return AfterSelection(moving={t: why for t, why in origin.items() if t not in fixed},
                          fixed={t: why for t, why in origin.items() if t in fixed}, read=read)
