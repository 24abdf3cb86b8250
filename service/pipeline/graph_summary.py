"""What one graph holds, in ORT's terms: op histogram, int8 kernels, biases, layout nodes.

Works on the ``onnx`` protobuf of a file as written or as ORT saved it after optimization
(``optimized_model_filepath``). ORT's saved graphs carry no value_info for its own
``com.microsoft`` ops, so tensor dtypes are propagated here from initializers, graph inputs and
the zero points of Q / QLinear nodes (enough to tell int8 from uint8 from float).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from service.schemas.levels import BiasState, LayoutInfo, NodeSummary

MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"

# Float compute ops whose int8 versions the coverage counts.
COMPUTE_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", f"{MS}.Attention", f"{MS}.MultiHeadAttention",
               f"{MS}.FusedConv", f"{MS}.FusedMatMul", f"{MS}.FusedGemm", f"{NCHWC}.Conv"}
# int8 kernels that stand for one of COMPUTE_OPS.
INT8_COMPUTE_KERNELS = {
    "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", f"{MS}.QLinearConv", f"{MS}.QGemm",
    f"{MS}.QAttention", f"{MS}.DynamicQuantizeMatMul", f"{MS}.MatMulIntegerToFloat",
    f"{MS}.QOrderedMatMul", f"{MS}.DynamicQuantizeLSTM", f"{MS}.QLinearConvTranspose", f"{MS}.NhwcQLinearConv",
}
# Other int8 kernels (element-wise, pooling, ...), from ORT's QDQ selector/action registry.
INT8_OTHER_KERNELS = {
    f"{MS}.QLinearAdd", f"{MS}.QLinearMul", f"{MS}.QLinearConcat", f"{MS}.QLinearSigmoid",
    f"{MS}.QLinearSoftmax", f"{MS}.QLinearAveragePool", f"{MS}.QLinearGlobalAveragePool",
    f"{MS}.QLinearLeakyRelu", f"{MS}.QLinearWhere", f"{MS}.QLinearReduceMean", f"{MS}.QLinearPool",
    f"{MS}.QEmbedLayerNormalization", f"{MS}.QLinearSplit",
}
INT8_KERNELS = INT8_COMPUTE_KERNELS | INT8_OTHER_KERNELS
# Index of the activation zero point among a kernel's inputs (default 2: x, x_scale, x_zero_point).
_ACT_ZP_INDEX = {f"{MS}.QLinearConcat": 1}
# Index of the output zero point (to type the kernel's output).
_OUT_ZP_INDEX = {"QLinearConv": 7, f"{MS}.QLinearConv": 7, "QLinearMatMul": 7, f"{MS}.QGemm": 7,
                 f"{MS}.QLinearAdd": 7, f"{MS}.QLinearMul": 7, f"{MS}.QLinearConcat": 1,
                 f"{MS}.QLinearSigmoid": 4, f"{MS}.QLinearSoftmax": 4, f"{MS}.QLinearAveragePool": 4,
                 f"{MS}.QLinearGlobalAveragePool": 4, f"{MS}.QLinearLeakyRelu": 4, f"{MS}.QLinearWhere": 8}
# Ops whose output dtype is not the first input's.
_FIXED_OUT = {"Shape": "int64", "Size": "int64", "NonZero": "int64", "ArgMax": "int64", "ArgMin": "int64",
              "Equal": "bool", "Less": "bool", "Greater": "bool", "Not": "bool", "And": "bool", "Or": "bool",
              "DequantizeLinear": "float32", "MatMulInteger": "int32", "ConvInteger": "int32",
              f"{MS}.MatMulIntegerToFloat": "float32", f"{MS}.DynamicQuantizeMatMul": "float32"}
# Ops that move/reshape data and never compute; not "left in float" in a meaningful sense.
_DATA_MOVEMENT = {"Shape", "Size", "Constant", "Identity", "Cast", "Gather", "Unsqueeze", "Squeeze", "Concat",
                  "Reshape", "Flatten", "Transpose", "Slice", "Expand", "Split", "Range", "ConstantOfShape"}
QDQ = {"QuantizeLinear", "DequantizeLinear"}


def op_key(op_type: str, domain: str) -> str:
    """Histogram key: ``op_type`` for ai.onnx, ``domain.op_type`` otherwise."""
    return f"{domain}.{op_type}" if domain not in ("", "ai.onnx") else op_type


def _np_dtype_name(elem_type: int) -> str:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - exotic types (float8, int4) have no plain numpy name
        return onnx.TensorProto.DataType.Name(elem_type).lower()


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


@dataclass
class Graph:
    """A loaded graph with the indexes the summaries and the diff need."""

    model: onnx.ModelProto
    nodes: list[onnx.NodeProto]
    initializers: dict[str, onnx.TensorProto]
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    consumers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    base_dir: Path | None = None  # where external initializers live when loaded lazily

    @property
    def opset(self) -> int:
        for o in self.model.opset_import:
            if o.domain in ("", "ai.onnx"):
                return o.version
        return 0

    def init_array(self, name: str) -> np.ndarray | None:
        t = self.initializers.get(name)
        if t is None:
            return None
        if t.data_location == onnx.TensorProto.EXTERNAL and self.base_dir is not None:
            # A graph loaded without its weights (graph_from_path(lazy=True)): read this one tensor.
            from onnx.external_data_helper import load_external_data_for_tensor

            t2 = onnx.TensorProto()
            t2.CopyFrom(t)
            load_external_data_for_tensor(t2, str(self.base_dir))
            return numpy_helper.to_array(t2)
        return numpy_helper.to_array(t)


def graph_from_model(model: onnx.ModelProto) -> Graph:
    g = model.graph
    nodes = list(g.node)
    inits = {t.name: t for t in g.initializer}
    # Constant nodes act as initializers for our purposes (dtype and value lookups).
    for n in nodes:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    t = onnx.TensorProto()
                    t.CopyFrom(a.t)
                    t.name = n.output[0]
                    inits[n.output[0]] = t
    graph = Graph(model=model, nodes=nodes, initializers=inits)
    for n in nodes:
        for o in n.output:
            if o:
                graph.producer[o] = n
        for i in n.input:
            if i:
                graph.consumers.setdefault(i, []).append(n)
    graph.dtypes = _propagate_dtypes(graph)
    return graph


def graph_from_path(path, *, lazy: bool = False) -> Graph:
    """``lazy``: external initializers stay on disk and are read one at a time when a summary needs
    one (a level graph of a 1 GB model is then summarized without holding its weights)."""
    if not lazy:
        return graph_from_model(onnx.load(str(path)))
    graph = graph_from_model(onnx.load(str(path), load_external_data=False))
    graph.base_dir = Path(path).parent
    return graph


def _propagate_dtypes(graph: Graph) -> dict[str, str]:
    g = graph.model.graph
    dt: dict[str, str] = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            dt[vi.name] = _np_dtype_name(vi.type.tensor_type.elem_type)
    for name, t in graph.initializers.items():
        dt[name] = _np_dtype_name(t.data_type)
    for n in graph.nodes:  # ONNX and ORT-saved graphs are topologically sorted
        key = op_key(n.op_type, n.domain)
        out_dt = None
        if key == "QuantizeLinear":
            out_dt = dt.get(n.input[2]) if len(n.input) > 2 and n.input[2] else "uint8"
            if out_dt is None:
                for a in n.attribute:
                    if a.name == "output_dtype" and a.i:
                        out_dt = _np_dtype_name(a.i)
        elif key in _OUT_ZP_INDEX:
            idx = _OUT_ZP_INDEX[key]
            out_dt = dt.get(n.input[idx]) if len(n.input) > idx and n.input[idx] else "uint8"
        elif key in _FIXED_OUT:
            out_dt = _FIXED_OUT[key]
        elif key == "Cast":
            for a in n.attribute:
                if a.name == "to":
                    out_dt = _np_dtype_name(a.i)
        elif key in ("Where",):
            out_dt = dt.get(n.input[1]) if len(n.input) > 1 else None
        else:
            first = next((i for i in n.input if i), None)
            out_dt = dt.get(first) if first else None
        for o in n.output:
            if o and o not in dt and out_dt is not None:
                dt[o] = out_dt
    return dt


def activation_dtype(graph: Graph, node: onnx.NodeProto) -> str | None:
    """dtype an int8 kernel's activation operand has, read from its zero point (or the tensor)."""
    key = op_key(node.op_type, node.domain)
    if key in (f"{MS}.DynamicQuantizeMatMul", f"{MS}.DynamicQuantizeLSTM"):
        return "uint8"  # quantized at run time, always u8 on CPU
    idx = _ACT_ZP_INDEX.get(key, 2)
    if key == f"{MS}.QLinearConcat":
        idx = 4  # Y_scale, Y_zp, then (X, X_scale, X_zp) triples: first input's zp
    if len(node.input) > idx and node.input[idx]:
        d = graph.dtypes.get(node.input[idx])
        if d:
            return d
    first = node.input[0] if node.input else ""
    return graph.dtypes.get(first)


def node_summaries(graph: Graph) -> list[NodeSummary]:
    out = []
    for n in graph.nodes:
        key = op_key(n.op_type, n.domain)
        out.append(NodeSummary(
            op_type=n.op_type, domain=n.domain, name=n.name, inputs=list(n.input), outputs=list(n.output),
            attributes=_attributes(n),
            activation_dtype=activation_dtype(graph, n) if key in INT8_KERNELS else None,
        ))
    return out


def op_histogram(graph: Graph) -> dict[str, int]:
    return dict(Counter(op_key(n.op_type, n.domain) for n in graph.nodes))


def compute_op_count(graph: Graph) -> int:
    return sum(1 for n in graph.nodes if op_key(n.op_type, n.domain) in COMPUTE_OPS)


def is_float(dtype: str | None) -> bool:
    return dtype is not None and dtype.startswith(("float", "bfloat"))


def ops_on_float(graph: Graph) -> dict[str, int]:
    """Non-Q/DQ compute ops whose first data input is float: what still runs in fp32."""
    c: Counter[str] = Counter()
    for n in graph.nodes:
        key = op_key(n.op_type, n.domain)
        if key in QDQ or key in INT8_KERNELS or n.op_type in _DATA_MOVEMENT:
            continue
        first = next((i for i in n.input if i), None)
        if first is not None and first not in graph.initializers and is_float(graph.dtypes.get(first)):
            c[key] += 1
    return dict(c)


def _bias_input_is_int32(graph: Graph, name: str) -> bool:
    if graph.dtypes.get(name) == "int32":
        return True
    p = graph.producer.get(name)
    return bool(p is not None and p.op_type == "DequantizeLinear" and graph.dtypes.get(p.input[0]) == "int32")


def bias_state(graph: Graph) -> BiasState:
    i32 = f32 = 0
    for n in graph.nodes:
        key = op_key(n.op_type, n.domain)
        if key in ("QLinearConv", f"{MS}.QLinearConv") and len(n.input) > 8 and n.input[8]:
            i32 += 1
        elif key == f"{MS}.QGemm" and len(n.input) > 6 and n.input[6]:
            i32 += 1
        elif key in ("Conv", "ConvTranspose", "Gemm", f"{MS}.FusedConv", f"{NCHWC}.Conv") and len(n.input) > 2 and n.input[2]:
            if _bias_input_is_int32(graph, n.input[2]):
                i32 += 1
            else:
                f32 += 1
    summary = "none" if not (i32 or f32) else "int32" if not f32 else "float32" if not i32 else "mixed"
    return BiasState(int32=i32, float32=f32, summary=summary)


def layout_info(graph: Graph, transposes_in_file: int) -> LayoutInfo:
    nhwc = nchwc = reorders = transposes = 0
    for n in graph.nodes:
        if n.domain == NCHWC:
            nchwc += 1
            if n.op_type in ("ReorderInput", "ReorderOutput"):
                reorders += 1
        elif n.domain == MS and (n.op_type.startswith("Nhwc") or any(
                a.name == "channels_last" and a.i == 1 for a in n.attribute)):
            nhwc += 1
        elif n.op_type == "Transpose" and n.domain in ("", "ai.onnx"):
            transposes += 1
    return LayoutInfo(nhwc_nodes=nhwc, transposes_inserted=max(0, transposes - transposes_in_file),
                      nchwc_nodes=nchwc, reorders=reorders)


def weight_quant_params(graph: Graph) -> list[dict]:
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
        mid = 0 if np.issubdtype(dtype, np.signedinteger) else (np.iinfo(dtype).max + 1) // 2
        out.append({
            "name": w, "dtype": dtype.name, "consumer": consumer,
            "per_channel": s is not None and s.size > 1,
            "symmetric": bool(np.all(zv == mid)),
            "zero_points_equal": bool(np.all(zv == zv[0])) if zv.size else True,
        })

    for n in graph.nodes:
        key = op_key(n.op_type, n.domain)
        if key == "DequantizeLinear" and n.input[0] in graph.initializers:
            cons = graph.consumers.get(n.output[0], [])
            add(n.input[0], n.input[1], n.input[2] if len(n.input) > 2 else None,
                cons[0].op_type if cons else "")
        elif key in ("QLinearConv", f"{MS}.QLinearConv", "QLinearMatMul", f"{MS}.QGemm"):
            add(n.input[3], n.input[4], n.input[5] if len(n.input) > 5 else None, n.op_type)
    return out


def quantized_activation_dtypes(graph: Graph) -> list[str]:
    """dtypes that QuantizeLinear writes activations in (the file's choice, before ORT)."""
    out = set()
    for n in graph.nodes:
        if n.op_type == "QuantizeLinear" and n.input[0] not in graph.initializers:
            d = graph.dtypes.get(n.output[0])
            if d:
                out.add(d)
    return sorted(out)


def output_steps(graph: Graph) -> list[float | None]:
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


# Ops whose QDQ node unit ORT turns into an int8 kernel or runs on int8 (qdq_selector_action_transformer.cc).
QDQ_FUSION_LIST = {"MaxPool", "ReduceMax", "ReduceMin", "Resize", "Expand", "Flatten", "Gather", "GatherElements",
                   "Reshape", "Slice", "Squeeze", "Tile", "Transpose", "Unsqueeze", "Split", "ArgMax",
                   "Conv", "MatMul", "Gemm", "Add", "Mul", "Concat", "AveragePool", "GlobalAveragePool",
                   "LeakyRelu", "Sigmoid", "Softmax", "Where"}
# On CPUs where QDQIsInt8Allowed() is false (x86), these selectors take uint8 activations only.
_U8_ONLY = {"Conv", "MatMul"}


def float_op_reasons(graph: Graph, *, int8_allowed: bool) -> dict[str, str]:
    """For each op type that still runs in float in this graph: why, in ORT's terms."""
    out: dict[str, str] = {}
    for n in graph.nodes:
        key = op_key(n.op_type, n.domain)
        if key in out or key in QDQ or key in INT8_KERNELS or n.op_type in _DATA_MOVEMENT:
            continue
        first = next((i for i in n.input if i), None)
        if first is None or first in graph.initializers or not is_float(graph.dtypes.get(first)):
            continue
        dqs = [graph.producer[i] for i in n.input if i in graph.producer
               and graph.producer[i].op_type == "DequantizeLinear"]
        qs = [c for o in n.output for c in graph.consumers.get(o, []) if c.op_type == "QuantizeLinear"]
        if not dqs:
            out[key] = "no DequantizeLinear before it: not quantized in the file"
        elif key not in QDQ_FUSION_LIST:
            out[key] = "not in ORT's QDQ fusion list: runs in float between DequantizeLinear and QuantizeLinear"
        elif not qs and n.op_type not in ("MatMul", "Gemm"):
            out[key] = "no QuantizeLinear after it: its output is not quantized in the file"
        else:
            act = {graph.dtypes.get(d.input[2]) for d in dqs if len(d.input) > 2 and d.input[2]
                   and d.input[0] not in graph.initializers}
            if not int8_allowed and n.op_type in _U8_ONLY and "int8" in act:
                out[key] = ("not fused: its activation stayed int8 (QDQS8ToU8Transformer leaves a QuantizeLinear "
                            "that feeds several DequantizeLinear) and on x86 ORT fuses Conv/MatMul on uint8 only")
            else:
                out[key] = "Q/DQ around it, but ORT's fusion conditions were not met (see the extended diff)"
    return out
