"""Graph outputs declared without a shape (or a type), given the ones ONNX shape inference finds.

ONNX Runtime runs such a file (onnx-graphsurgeon writes one whenever a new output tensor has no
shape set), but onnx's checker refuses it ("Field 'shape' of 'type' is required"), and an output
without a shape has no rank to report. Shape inference derives what the graph computes there, so
the fp32 reference is written with those shapes (ORT computes the same values either way), the
way sparse initializers are written dense (sparse.py); a note in the report says so. An output
inference cannot type is left as it is, and the checker's refusal stands."""
from __future__ import annotations


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
    graph_only = onnx.ModelProto()
    graph_only.CopyFrom(model)
    for t in graph_only.graph.initializer:  # weights: inference reads their dims; small ones (a Reshape's shape) stay
        if t.HasField("raw_data") and len(t.raw_data) > 1024:
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
            del t.external_data[:]
            t.external_data.add(key="location", value="unread")
    try:
        inferred = onnx.shape_inference.infer_shapes(graph_only, strict_mode=False)
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
