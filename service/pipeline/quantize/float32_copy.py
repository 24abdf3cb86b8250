"""The float32 copy of a float16 upload, which every quantizer here starts from.

On the CPU EP, ORT runs a float16 node that has no float16 kernel (Conv, Gemm, most others) between
Casts to and from float (``InsertCastTransformer``, onnxruntime/core/optimizer/insert_cast_transformer.cc,
nodes named ``InsertedPrecisionFreeCast_<tensor>``), and a Cast between a DequantizeLinear and its
op breaks the QDQ node unit: a quantized float16 graph runs no int8 kernel there (both pinned in
tests/pipeline/inputs/test_float16_uploads.py). The toolchains also break on one: torch.onnx.export wrote
a float16 ``QuantizeLinear`` with a float32 scale, ORT's quantizer float16 scales that
DequantizeLinear takes only from opset 19, or, after quant_pre_process had put every weight behind
such a Cast, found no bias initializer. So PT2E and both ORT paths quantize this copy: the graph
computing in float32, behind the upload's own inputs and outputs. The fp32 reference stays the
upload as ORT runs it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from service.pipeline.files import has_external_initializers
from service.pipeline.isolation import first_line
from service.pipeline.vocabulary import HALF_ELEM_TYPES, attribute, computes_in_half, node_reads, rename_reads

NOTE = ("the upload computes in float16: quantized as its float32 copy ({count} half tensors, Casts and dtype "
        "attributes widened, exactly), behind the upload's inputs and outputs; ORT's CPU EP runs such a graph's "
        "nodes in float too, and a quantized float16 graph runs no int8 kernel there")


def widen_half_to_float32(model, notes: list[str]) -> None:
    """In place: half initializers and constants widened (exact), Casts and dtype attributes to half
    made float32, a Cast of a weight to float folded into the weight; a half graph input is cast to
    float32 where it enters and a half output cast back where it leaves. A model without half
    values is left alone."""
    from onnx import TensorProto, helper

    if not computes_in_half(model.graph):
        return
    g = model.graph
    count = _widen_graph(g)
    renames, casts_in = {}, []
    for vi in g.input:
        if vi.type.tensor_type.elem_type in HALF_ELEM_TYPES:
            renames[vi.name] = f"{vi.name}__float32"
            casts_in.append(helper.make_node("Cast", [vi.name], [renames[vi.name]], to=TensorProto.FLOAT,
                                             name=f"{vi.name}__to_float32"))
    rename_reads(g, renames)
    half_outputs = {o.name: o.type.tensor_type.elem_type for o in g.output
                    if o.type.tensor_type.elem_type in HALF_ELEM_TYPES and o.name not in renames}
    out_renames = {name: f"{name}__float32" for name in half_outputs}
    for node in g.node:
        node.output[:] = [out_renames.get(o, o) for o in node.output]
    rename_reads(g, out_renames)
    casts_out = [helper.make_node("Cast", [out_renames[name]], [name], to=elem, name=f"{name}__to_half")
                 for name, elem in half_outputs.items()]
    nodes = casts_in + list(g.node) + casts_out
    del g.node[:]
    g.node.extend(nodes)
    notes.append(NOTE.format(count=count))


def float32_copy_for_ort(fp32_path: Path, out_path: Path, *, model) -> tuple[Path, str | None]:
    """The file ORT's quantizer should read for a float16 upload: its float32 copy at ``out_path``;
    ``fp32_path`` itself (and no note) for any other. ``model``: the file parsed without its data."""
    import onnx

    if model is None:
        model = onnx.load(str(fp32_path), load_external_data=False)
    if not computes_in_half(model.graph):
        return fp32_path, None
    try:
        full = onnx.load(str(fp32_path))
        notes: list[str] = []
        widen_half_to_float32(full, notes)
        large = has_external_initializers(model)
        onnx.save(full, str(out_path), save_as_external_data=large,
                  location=out_path.name + ".data" if large else None)
    except Exception as e:  # noqa: BLE001 - quantize the file as it is, and say so
        return fp32_path, (f"the float32 copy of the float16 upload could not be written ({first_line(e)}); "
                           "quantized as is")
    return out_path, notes[0]


def _widen_graph(g) -> int:
    """Half initializers, Constant values, Cast/dtype attributes and value types of ``g`` and its
    bodies made float32, and Casts of an initializer to float folded into it; how many were changed.
    The top graph's inputs and outputs are left to ``widen_half_to_float32``, a body's are widened."""
    from onnx import AttributeProto, TensorProto, numpy_helper

    changed = 0

    def widen_tensor(t) -> bool:
        if t.data_type not in HALF_ELEM_TYPES:
            return False
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
        return True

    for t in g.initializer:
        changed += widen_tensor(t)
    for vi in g.value_info:
        if vi.type.tensor_type.elem_type in HALF_ELEM_TYPES:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    for node in g.node:
        for a in node.attribute:
            if a.type == AttributeProto.TENSOR:
                changed += widen_tensor(a.t)
            elif a.type == AttributeProto.INT and a.name in ("to", "dtype") and a.i in HALF_ELEM_TYPES:
                a.i = TensorProto.FLOAT
                changed += 1
            elif a.type == AttributeProto.GRAPH:
                changed += _widen_body(a.g)
            elif a.type == AttributeProto.GRAPHS:
                changed += sum(_widen_body(b) for b in a.graphs)
    _fold_weight_casts(g)
    return changed


def _fold_weight_casts(g) -> None:
    """A Cast to float of a (now float32) initializer becomes that initializer under the Cast's
    output name: a weight stored in float16 and cast where it is read (silero-vad's half model)
    must be an initializer for ORT's quantizer to quantize it (``find_by_name`` over initializers).
    The initializer is renamed when the Cast is its only reader, copied otherwise."""
    from onnx import TensorProto

    inits = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    folded = [n for n in g.node if n.op_type == "Cast" and len(n.input) == 1 and n.input[0] in inits
              and inits[n.input[0]].data_type == TensorProto.FLOAT and attribute(n, "to") == TensorProto.FLOAT
              and n.output[0] not in outputs]
    if not folded:
        return
    readers = Counter(name for n in g.node for name in node_reads(n))
    for n in folded:
        source = n.input[0]
        if readers[source] == 1 and source not in outputs:
            inits[source].name = n.output[0]
        else:
            g.initializer.add().CopyFrom(inits[source])
            g.initializer[-1].name = n.output[0]
        readers[source] -= 1
        g.node.remove(n)


def _widen_body(body) -> int:
    from onnx import TensorProto

    for vi in (*body.input, *body.output):
        if vi.type.tensor_type.elem_type in HALF_ELEM_TYPES:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    return _widen_graph(body)
