"""What one graph holds, in ORT's terms: op histogram, int8 kernels, biases, layout nodes.

Works on the graph index (``vocabulary.GraphIndex``) of a file as written or as ORT saved it
after optimization (``optimized_model_filepath``); the op sets it counts come from
``vocabulary``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from service.pipeline.vocabulary import (
    BIASED_COMPUTE_OPS, CONVERTER_METADATA_PREFIX, DATA_MOVEMENT_OPS, GraphIndex, INT8_KERNELS, MS, NCHWC, QDQ_OPS,
    QLINEAR_BIAS_INDEX, SYMMETRIC_ZERO_POINT, is_float, is_onnx_domain, op_key,
)
from service.schemas.levels import BiasState, LayoutInfo, NodeSummary

# Index of the activation zero point among a kernel's inputs (default 2: x, x_scale, x_zero_point).
_ACT_ZP_INDEX = {f"{MS}.QLinearConcat": 4}  # Y_scale, Y_zp, then (X, X_scale, X_zp) triples: first input's zp


_ATTR_SKIP = {"value"}  # Constant payloads: large and not what a reader compares


def _attributes(node: onnx.NodeProto) -> dict:
    out = {}
    for a in node.attribute:
        if a.name in _ATTR_SKIP or a.type in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.GRAPH,
                                              onnx.AttributeProto.GRAPHS, onnx.AttributeProto.TENSORS):
            continue
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list):
            v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


def activation_dtype(graph: GraphIndex, node: onnx.NodeProto) -> str | None:
    """dtype an int8 kernel's activation operand has, read from its zero point (or the tensor)."""
    key = op_key(node)
    if key in (f"{MS}.DynamicQuantizeMatMul", f"{MS}.DynamicQuantizeLSTM"):
        return "uint8"  # quantized at run time, always u8 on CPU
    idx = _ACT_ZP_INDEX.get(key, 2)
    if len(node.input) > idx and node.input[idx]:
        d = graph.dtypes.get(node.input[idx])
        if d:
            return d
    first = node.input[0] if node.input else ""
    return graph.dtypes.get(first)


def node_summaries(graph: GraphIndex) -> list[NodeSummary]:
    out = []
    for n in graph.nodes:
        key = op_key(n)
        out.append(NodeSummary(
            op_type=n.op_type, domain=n.domain, name=n.name, inputs=list(n.input), outputs=list(n.output),
            attributes=_attributes(n),
            activation_dtype=activation_dtype(graph, n) if key in INT8_KERNELS else None,
        ))
    return out


def op_histogram(graph: GraphIndex) -> dict[str, int]:
    return dict(Counter(op_key(n) for n in graph.nodes))


def ops_on_float(graph: GraphIndex) -> dict[str, int]:
    """Non-Q/DQ ops whose first activation input (whatever its position: ``MatMul(W, x)`` reads x
    second) is float: what still runs in fp32. An op of constants only is left out."""
    c: Counter[str] = Counter()
    for n in graph.nodes:
        key = op_key(n)
        if key in QDQ_OPS or key in INT8_KERNELS or n.op_type in DATA_MOVEMENT_OPS:
            continue
        first = next((i for i in n.input if i and i not in graph.initializers), None)
        if first is not None and is_float(graph.dtypes.get(first)):
            c[key] += 1
    return dict(c)


def _bias_input_is_int32(graph: GraphIndex, name: str) -> bool:
    if graph.dtypes.get(name) == "int32":
        return True
    p = graph.producer.get(name)
    return bool(p is not None and p.op_type == "DequantizeLinear" and graph.dtypes.get(p.input[0]) == "int32")


def bias_state(graph: GraphIndex) -> BiasState:
    i32 = f32 = 0
    for n in graph.nodes:
        key = op_key(n)
        bias = QLINEAR_BIAS_INDEX.get(key)
        if bias is not None:
            i32 += int(len(n.input) > bias and bool(n.input[bias]))
        elif key in BIASED_COMPUTE_OPS | {f"{MS}.FusedConv", f"{NCHWC}.Conv"} and len(n.input) > 2 and n.input[2]:
            if _bias_input_is_int32(graph, n.input[2]):
                i32 += 1
            else:
                f32 += 1
    summary = "none" if not (i32 or f32) else "int32" if not f32 else "float32" if not i32 else "mixed"
    return BiasState(int32=i32, float32=f32, summary=summary)


def layout_info(graph: GraphIndex, transposes_in_file: int) -> LayoutInfo:
    nhwc = nchwc = reorders = transposes = 0
    for n in graph.nodes:
        if n.domain == NCHWC:
            nchwc += 1
            if n.op_type in ("ReorderInput", "ReorderOutput"):
                reorders += 1
        elif n.domain == MS and (n.op_type.startswith("Nhwc") or any(
                a.name == "channels_last" and a.i == 1 for a in n.attribute)):
            nhwc += 1
        elif n.op_type == "Transpose" and is_onnx_domain(n.domain):
            transposes += 1
    return LayoutInfo(nhwc_nodes=nhwc, transposes_inserted=max(0, transposes - transposes_in_file),
                      nchwc_nodes=nchwc, reorders=reorders)


def weight_quant_params(graph: GraphIndex) -> list[dict]:
    """Per quantized weight: per_channel, symmetric, zero points; for lints and the decisions table.

    A weight is an integer initializer of rank >= 2 read by a DequantizeLinear, or operand 3 of a
    QLinearConv / QLinearMatMul / QGemm.
    """
    out = []
    seen = set()

    def add(w: str, scale: str, zp: str | None, consumer: str):
        if w in seen:
            return
        t = graph.initializers.get(w)  # dims and dtype only: the weight's values are not needed
        if t is None or len(t.dims) < 2:
            return
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        if not np.issubdtype(dtype, np.integer):
            return
        seen.add(w)
        s = graph.init_array(scale)
        z = graph.init_array(zp) if zp else None
        zv = z.reshape(-1) if z is not None else np.zeros(1, dtype=dtype)
        mid = SYMMETRIC_ZERO_POINT.get(dtype.name, 0)
        out.append({
            "name": w, "dtype": dtype.name, "consumer": consumer,
            "per_channel": s is not None and s.size > 1,
            "symmetric": bool(np.all(zv == mid)),
            "zero_points_equal": bool(np.all(zv == zv[0])) if zv.size else True,
        })

    for n in graph.nodes:
        key = op_key(n)
        if key == "DequantizeLinear" and n.input[0] in graph.initializers:
            cons = graph.consumers.get(n.output[0], [])
            add(n.input[0], n.input[1], n.input[2] if len(n.input) > 2 else None,
                cons[0].op_type if cons else "")
        elif key in ("QLinearConv", f"{MS}.QLinearConv", "QLinearMatMul", f"{MS}.QGemm"):
            add(n.input[3], n.input[4], n.input[5] if len(n.input) > 5 else None, n.op_type)
    return out


# torchao's XNNPACK config builds every observer with eps=2**-12 (get_symmetric_quantization_config):
# a scale below it is raised to it, so a weight channel whose largest |w| is under 127 * 2**-12 keeps
# fewer than 127 steps, and values under half a step become 0.
TORCHAO_XNNPACK_EPS = 2.0 ** -12


@dataclass(frozen=True)
class FlooredWeight:
    name: str
    reader: str  # the node that reads it, as the upload names it where the file says (PT2E of an ONNX upload)
    channels: int  # channels whose scale is the floor and whose largest |q| is under qmax: the floor bit
    of: int
    zero_share: float  # share of those channels' int8 values that are 0


def scales_at_floor(graph: GraphIndex, floor: float = TORCHAO_XNNPACK_EPS) -> list[FlooredWeight]:
    """Weights whose scale is exactly ``floor`` where the floor decided it: a channel counts when its
    scale equals the floor and its largest |q - zero point| is below 127 but not 0, since a scale the
    observer computed itself maps the largest |w| to 127. (An activation at the floor cannot be told from the
    file alone: an all-zero mask sits there and loses nothing.) Only weights with a channel at the
    floor are read, so a large file costs one pass over its scales."""
    at = np.float32(floor)
    weights: list[FlooredWeight] = []
    seen: set[str] = set()  # a weight a DequantizeLinear copy reads again
    for n in graph.nodes:
        if n.op_type != "DequantizeLinear" or len(n.input) < 2 or n.input[0] not in graph.initializers:
            continue
        s = graph.init_array(n.input[1])
        if s is None or not np.any(s.astype(np.float32) == at):
            continue
        if n.input[0] in seen:
            continue
        seen.add(n.input[0])
        q = graph.init_array(n.input[0])
        if q is None or q.ndim < 2 or not np.issubdtype(q.dtype, np.integer):
            continue
        z = graph.init_array(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if s.size > 1:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1) % q.ndim
            per = np.moveaxis(q, axis, 0).reshape(q.shape[axis], -1).astype(np.int32)
        else:
            per = q.reshape(1, -1).astype(np.int32)
        if s.size != per.shape[0] or (z is not None and z.size not in (1, per.shape[0])):
            continue  # a scale per something else than the DQ's axis: not a file ORT would run
        per = np.abs(per - (z.reshape(-1, 1).astype(np.int32) if z is not None else 0))
        floored = s.reshape(-1).astype(np.float32) == at
        # a channel of zeros only (pruned, dead) may have been zero in fp32 too: no loss to name
        peak = per.max(axis=1)
        bit = floored & (peak < np.iinfo(q.dtype).max) & (peak > 0)
        if bit.any():
            weights.append(FlooredWeight(name=n.input[0], reader=_reader_named(graph, n.output[0]),
                                         channels=int(bit.sum()), of=int(per.shape[0]),
                                         zero_share=float((per[bit] == 0).mean())))
    return weights


def _reader_named(graph: GraphIndex, tensor: str) -> str:
    """'Conv writing 'y'' for a PT2E file's node the converter annotated with the upload's op and outputs
    (its node names are torch's), else the node's own op type and name."""
    readers = graph.consumers.get(tensor, [])
    if not readers:
        return "no node"
    r = readers[0]
    meta = {p.key: p.value for p in r.metadata_props}
    outputs = meta.get(CONVERTER_METADATA_PREFIX + "onnx_outputs")
    if outputs:
        return f"{meta.get(CONVERTER_METADATA_PREFIX + 'onnx_op', r.op_type)} writing {outputs.split(',')[0]!r}"
    return f"{r.op_type} {r.name!r}"


def quantized_activation_dtypes(graph: GraphIndex) -> list[str]:
    """dtypes that QuantizeLinear writes activations in (the file's choice, before ORT)."""
    out = set()
    for n in graph.nodes:
        if n.op_type == "QuantizeLinear" and n.input[0] not in graph.initializers:
            d = graph.dtypes.get(n.output[0])
            if d:
                out.add(d)
    return sorted(out)


def output_steps(graph: GraphIndex) -> list[float | None]:
    """Per graph output: the quantization step (max scale) of the DequantizeLinear producing it."""
    out = []
    for o in graph.model.graph.output:
        p = graph.producer.get(o.name)
        step = None
        if p is not None and p.op_type == "DequantizeLinear":
            s = graph.init_array(p.input[1])
            if s is not None and s.size:
                step = float(np.max(np.abs(s)))
        out.append(step)
    return out
