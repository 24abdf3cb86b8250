"""The one ONNX / ONNX Runtime vocabulary every stage speaks: op keys, op sets, one graph index.

Every count the report makes (``int8_coverage``, ``int8_kernels``, ``ops_float``, the file
inventory, the rewrite names) reads its op sets from here, so two figures can never count
different ops for the same question. Where a set restates ORT, the ORT source it comes from is
named beside it (onnxruntime 1.32.0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np
import onnx
from onnx import helper, numpy_helper

MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"
QUANTIZE, DEQUANTIZE = "QuantizeLinear", "DequantizeLinear"
QDQ_OPS = frozenset({QUANTIZE, DEQUANTIZE})


class _HasOp(Protocol):
    op_type: str
    domain: str


# ONNX spells its default domain two ways; this is the one place that says so (a tree rule holds every
# other module to ``is_onnx_domain``).
_ONNX_DOMAIN_SPELLINGS = ("", "ai.onnx")


def is_onnx_domain(domain: str | None) -> bool:
    """Whether a node's or an opset import's ``domain`` is ONNX's default one (written "" or "ai.onnx";
    None, as an unset field reads in some builders, is "")."""
    return (domain or "") in _ONNX_DOMAIN_SPELLINGS


def onnx_domain_name(domain: str | None) -> str:
    """``domain`` with the default one written "" (ONNX's schema lookups take that spelling)."""
    return "" if is_onnx_domain(domain) else domain


def ai_onnx_opset(model, default: int | None = None) -> int | None:
    """The version of the default domain (ai.onnx, written "" or "ai.onnx") ``model`` imports;
    ``default`` when it imports none (a model of custom ops only)."""
    return next((o.version for o in model.opset_import if is_onnx_domain(o.domain)), default)


def op_key(node: _HasOp) -> str:
    """Histogram key of a node (NodeProto or NodeSummary): ``op_type`` in ai.onnx, ``domain.op_type``
    elsewhere, so ``QLinearConv`` and ``com.microsoft.QLinearConv`` stay apart."""
    return node.op_type if is_onnx_domain(node.domain) else f"{node.domain}.{node.op_type}"


# Float compute ops: with the int8 compute kernels, the int8_coverage denominator (counted in each
# level graph; LSTM/GRU/RNN are GEMMs inside one node, and ORT's static quantizers leave them float) and the ops
# ``compute_ops_float`` lists when they still run in float. com.microsoft.MultiHeadAttention is one:
# its CPU kernel runs its GEMMs in float and ORT has no int8 form of it (QAttention replaces
# Attention only), so it counts against coverage and is listed when it stays float.
COMPUTE_OPS = frozenset({
    "Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN", f"{MS}.Attention", f"{MS}.MultiHeadAttention",
    f"{MS}.FusedConv", f"{MS}.FusedMatMul", f"{MS}.FusedGemm", f"{NCHWC}.Conv",
})
# Contrib ops ONNX Runtime's graph optimizer writes into a session's graph, by the rewrite that writes
# them, by the name it registers under (GeluFusion's Level2 instance is GeluFusionL2: graph_transformer_utils.cc
# creates one per level); an upload holding them was saved after ORT optimized it (optimized_model_filepath).
# Pinned at level extended in tests/pipeline/inspect/test_ort_optimized_upload.py; the names in tests/pipeline/test_vocabulary.py.
ORT_OPTIMIZER_OPS = {
    f"{MS}.FusedConv": "ConvActivationFusion", f"{MS}.FusedGemm": "GemmActivationFusion",
    f"{MS}.FusedMatMul": "MatMulScaleFusion, MatmulTransposeFusion", f"{MS}.BiasGelu": "BiasGeluFusion",
    f"{MS}.Gelu": "GeluFusionL2", f"{MS}.FastGelu": "FastGeluFusion",
    f"{MS}.SkipLayerNormalization": "SkipLayerNormFusion", f"{NCHWC}.Conv": "NchwcTransformer",
}
# int8 kernels that stand for one of COMPUTE_OPS (the int8_coverage numerator).
INT8_COMPUTE_KERNELS = frozenset({
    "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", f"{MS}.QLinearConv", f"{MS}.QGemm",
    f"{MS}.QAttention", f"{MS}.DynamicQuantizeMatMul", f"{MS}.MatMulIntegerToFloat",
    f"{MS}.QOrderedMatMul", f"{MS}.DynamicQuantizeLSTM", f"{MS}.QLinearConvTranspose", f"{MS}.NhwcQLinearConv",
})
# Other int8 kernels (element-wise, pooling, ...), from ORT's QDQ selector/action registry and
# contrib ops (com.microsoft.QuickGelu is a float op despite its Q).
INT8_OTHER_KERNELS = frozenset({
    f"{MS}.QLinearAdd", f"{MS}.QLinearMul", f"{MS}.QLinearConcat", f"{MS}.QLinearSigmoid",
    f"{MS}.QLinearSoftmax", f"{MS}.QLinearAveragePool", f"{MS}.QLinearGlobalAveragePool",
    f"{MS}.QLinearLeakyRelu", f"{MS}.QLinearWhere", f"{MS}.QLinearReduceMean", f"{MS}.QLinearPool",
    f"{MS}.QEmbedLayerNormalization", f"{MS}.QLinearSplit",
})
INT8_KERNELS = INT8_COMPUTE_KERNELS | INT8_OTHER_KERNELS
# Weight-only n-bit kernels: weights stored quantized, activations float. Not int8 kernels (they do
# not count towards int8 coverage), but a file holding one was written by a quantizer.
WEIGHT_ONLY_KERNELS = frozenset({f"{MS}.MatMulNBits"})
# What a file holds in place of float ops (the inventory's "int8_kernels_in_file", the QOperator format).
QUANTIZED_KERNELS = INT8_KERNELS | WEIGHT_ONLY_KERNELS
# Ops that only appear in a file some tool already quantized.
QUANTIZED_FILE_OPS = QDQ_OPS | QUANTIZED_KERNELS | {
    "DynamicQuantizeLinear", f"{MS}.QuantizeLinear", f"{MS}.DequantizeLinear"}

# ORT 1.32's CPU QDQ selector registry, by the kind of rule each op is registered under
# (qdq_selector_action_transformer.cc; inspect/blockers.py reads each rule's conditions).
QDQ_DROP = frozenset({"Expand", "Flatten", "Gather", "GatherElements", "Reshape", "Slice", "Squeeze", "Tile",
                      "Transpose", "Unsqueeze"})  # DropQDQNodesRules
QDQ_DROP_NO16 = frozenset({"Resize"})  # DropQDQNodesRules, 8-bit only
# DropQDQNodesRules with a positive scale; MaxPool registered for {12, 22} only (blockers.OP_VERSIONS).
QDQ_DROP_POSITIVE = frozenset({"MaxPool", "ReduceMax", "ReduceMin"})
QDQ_UNARY = frozenset({"AveragePool", "LeakyRelu", "GlobalAveragePool", "Sigmoid", "Softmax"})  # UnaryOpQDQRules
QDQ_BINARY = frozenset({"Add", "Mul"})  # BinaryOpQDQRules
# Ops whose Q/DQ ORT drops or replaces so that they run on the integer data
# (DropQDQNodesRules, SplitQDQRules, DropDQNodesRules).
QDQ_DROP_OPS = QDQ_DROP | QDQ_DROP_NO16 | QDQ_DROP_POSITIVE | {"Split", "ArgMax"}
# Ops whose QDQ node unit ORT turns into an int8 kernel or runs on int8: the drop list plus the
# unary / binary / variadic / Conv / MatMul / Gemm / Where rules of the same file.
QDQ_FUSION_LIST = QDQ_DROP_OPS | QDQ_UNARY | QDQ_BINARY | {"Conv", "MatMul", "Gemm", "Concat", "Where"}
# Activations whose clamp a QuantizeLinear after them absorbs: the Level2 rules ReluQuantFusion /
# ClipQuantFusion (registered as ReluQuantRewrite / ClipQuantRewrite) remove them at session time,
# quantize_static (QDQ) leaves them out of the file, and ORT's QOperator quantizer drops them
# (QLinearActivation.QuantizeClipRelu).
ACTIVATIONS_ABSORBED_BY_Q_ORDER = ("Relu", "Clip")  # the order reports list them in
ACTIVATIONS_ABSORBED_BY_Q = frozenset(ACTIVATIONS_ABSORBED_BY_Q_ORDER)
# Ops that run a subgraph attribute.
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
# Recurrences: GEMMs inside one node, unrolled step by step by torch.export.
RECURRENT_OPS = frozenset({"LSTM", "GRU", "RNN"})
# Ops whose output is an index picked by value (a flipped pick changes everything read through it).
RANKING_OPS = frozenset({"TopK", "ArgMax", "ArgMin"})
# Ops whose output depends only on their input's shape, never its values.
SHAPE_READING_OPS = frozenset({"Shape", "Size"})
# Compute ops whose input 2 is a bias (what quantize_bias_tensor reads; int32 in a quantized file).
BIASED_COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "Gemm"})
# Ops whose result does not change when their inputs are swapped.
COMMUTATIVE_OPS = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean"})
# ONNX ops that draw random numbers; without a ``seed`` attribute ORT seeds each kernel with one
# per-process value (from the clock unless set) plus the node's index (cpu/generator/random.h).
# quantcompare's name for the copy of a shared bias it gives each further reader before ORT quantizes
# (quantize/ort_fixups.shared_biases_copied): '<bias>__reader<k>', and ORT's tensors made from it.
BIAS_COPY_MARK = "__reader"

RANDOM_LIKE_OPS = frozenset({"RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})  # read an input
RANDOM_OPS = RANDOM_LIKE_OPS | {"RandomNormal", "RandomUniform"}
# ONNX ops whose output *shape* is computed from the values they read (the ONNX spec's output
# shapes: NonMaxSuppression [num_selected, 3], NonZero [rank, num_nonzero], Unique [num_unique],
# Compress [num_true]). Downstream of one, two runs of the same graph on the same input can differ in
# length when the values differ: a quantized detector keeps other boxes than fp32 does.
SELECTION_OPS = frozenset({"NonMaxSuppression", "NonZero", "Unique", "Compress"})
# (The selections the ONNX -> torch converter carries whole, and the size arithmetic it evaluates on their
# counts, are the converter's own: onnx_torch/op_sets.py.)
# Ops whose result says which rows to keep, by value: the selections above, and TopK (a detector's
# end-to-end head keeps its 300 best anchors), whose output shape is fixed by k.
ROW_PICKING_OPS = SELECTION_OPS | {"TopK"}

# Ops that move or reshape data and never compute: not "left in float" in a meaningful sense.
DATA_MOVEMENT_OPS = frozenset({
    "Shape", "Size", "Constant", "Identity", "Cast", "Gather", "Unsqueeze", "Squeeze", "Concat",
    "Reshape", "Flatten", "Transpose", "Slice", "Expand", "Split", "Range", "ConstantOfShape",
})

# (data, scale, zero_point) operand positions of QOperator ops; the last triple describes the
# output (data -1). From the ONNX and com.microsoft operator schemas.
QLINEAR_OPERANDS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "QLinearConv": ((0, 1, 2), (3, 4, 5), (-1, 6, 7)),
    "QLinearMatMul": ((0, 1, 2), (3, 4, 5), (-1, 6, 7)),
    f"{MS}.QLinearConv": ((0, 1, 2), (3, 4, 5), (-1, 6, 7)),
    f"{MS}.QGemm": ((0, 1, 2), (3, 4, 5), (-1, 7, 8)),  # C (bias) at 6
    f"{MS}.QLinearAdd": ((0, 1, 2), (3, 4, 5), (-1, 6, 7)),
    f"{MS}.QLinearMul": ((0, 1, 2), (3, 4, 5), (-1, 6, 7)),
    f"{MS}.QLinearSigmoid": ((0, 1, 2), (-1, 3, 4)),
    f"{MS}.QLinearLeakyRelu": ((0, 1, 2), (-1, 3, 4)),
    f"{MS}.QLinearSoftmax": ((0, 1, 2), (-1, 3, 4)),
    f"{MS}.QLinearGlobalAveragePool": ((0, 1, 2), (-1, 3, 4)),
    f"{MS}.QLinearAveragePool": ((0, 1, 2), (-1, 3, 4)),
    f"{MS}.QLinearReduceMean": ((0, 1, 2), (-1, 3, 4)),
}
# Index of a kernel's output zero point (its dtype types the output).
OUTPUT_ZERO_POINT_INDEX = {k: operands[-1][2] for k, operands in QLINEAR_OPERANDS.items()} | {
    f"{MS}.QLinearConcat": 1,  # Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples
    f"{MS}.QLinearWhere": 8,
}
# Kernels whose output is float when their output scale is absent (QGemm's y_scale is optional).
FLOAT_OUTPUT_WITHOUT_SCALE = {f"{MS}.QGemm": 7}
# Bias operand of int8 kernels (int32 in the file).
QLINEAR_BIAS_INDEX = {"QLinearConv": 8, f"{MS}.QLinearConv": 8, f"{MS}.QGemm": 6}
# Zero point of a symmetric quantization, per integer dtype.
SYMMETRIC_ZERO_POINT = {"int8": 0, "int16": 0, "int4": 0, "int32": 0, "uint8": 128, "uint16": 32768, "uint4": 8}

# Ops whose output dtype is not their first input's.
_FIXED_OUT = {"Shape": "int64", "Size": "int64", "NonZero": "int64", "ArgMax": "int64", "ArgMin": "int64",
              "Equal": "bool", "Less": "bool", "Greater": "bool", "Not": "bool", "And": "bool", "Or": "bool",
              "DequantizeLinear": "float32", "MatMulInteger": "int32", "ConvInteger": "int32",
              f"{MS}.MatMulIntegerToFloat": "float32", f"{MS}.DynamicQuantizeMatMul": "float32"}


def dtype_name(elem_type: int) -> str:
    """numpy name of an ONNX TensorProto data type ('float32', 'uint8', 'int4', ...)."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - exotic types (float8, ...) have no plain numpy name
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def is_float(dtype: str | None) -> bool:
    return dtype is not None and dtype.startswith(("float", "bfloat"))


HALF_ELEM_TYPES = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


def computes_in_half(graph: onnx.GraphProto) -> bool:
    """Whether the graph holds float16/bfloat16 values: a half input, or (here or in an If/Loop/Scan
    body) a half initializer, Constant or Cast to half (onnxconverter-common's ``keep_io_types=True``
    keeps float32 inputs and casts inside). Read from the graph's declarations only, so external
    weights stay on disk."""
    return any(vi.type.tensor_type.elem_type in HALF_ELEM_TYPES for vi in graph.input) or _holds_half(graph)


def _holds_half(graph: onnx.GraphProto) -> bool:
    if any(t.data_type in HALF_ELEM_TYPES for t in graph.initializer):
        return True
    for node in graph.node:
        if node.op_type == "Cast" and attribute(node, "to") in HALF_ELEM_TYPES:
            return True
        if node.op_type == "Constant" and any(a.t.data_type in HALF_ELEM_TYPES for a in node.attribute
                                              if a.type == onnx.AttributeProto.TENSOR):
            return True
        if any(_holds_half(body) for body in subgraphs(node)):
            return True
    return False


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node, including those inside If/Loop/Scan subgraphs."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from all_nodes(g)


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The If/Loop/Scan bodies a node holds."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Names a body reads from the graphs around it: not its own inputs, initializers or outputs
    (an If/Loop/Scan's implicit inputs)."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads |= {i for i in node.input if i}
        for body in subgraphs(node):
            reads |= outer_reads(body)
        local |= {o for o in node.output if o}
    return reads - local


def node_reads(node: onnx.NodeProto) -> set[str]:
    """Every tensor ``node`` reads: its inputs, and what its If/Loop/Scan bodies read from outside."""
    names = {i for i in node.input if i}
    for body in subgraphs(node):
        names |= outer_reads(body)
    return names


def rename_reads(graph: onnx.GraphProto, renames: dict[str, str]) -> None:
    """Node inputs of ``graph`` renamed; in its subgraphs, only the reads of names a body does not
    define itself (a body may shadow an outer name), and a body output that returns an outer value."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in renames:
                node.input[i] = renames[name]
        for sub in subgraphs(node):
            rename_outer_reads(sub, renames)


def rename_outer_reads(body: onnx.GraphProto, renames: dict[str, str]) -> None:
    """In an If/Loop/Scan body: the reads of the names it does not define itself (a body may shadow
    an outer name), and an output that returns such an outer value as is."""
    local = {i.name for i in body.input} | {t.name for t in body.initializer}
    local |= {o for n in body.node for o in n.output}
    outer = {k: v for k, v in renames.items() if k not in local}
    if outer:
        rename_reads(body, outer)
        for o in body.output:
            if o.name in outer:
                o.name = outer[o.name]


def all_tensor_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor name of the graph, its subgraphs' included, so that a fresh name never shadows
    a body's own."""
    names = {vi.name for vi in (*graph.input, *graph.output, *graph.value_info)}
    names.update(t.name for t in graph.initializer)
    for node in all_nodes(graph):
        names.update(t for t in (*node.input, *node.output) if t)
    return names


def attribute(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


@dataclass
class GraphIndex:
    """One main graph with its lookups: constants, producers, consumers and tensor dtypes.

    ``initializers`` includes the tensors of Constant nodes (they act as initializers for every
    lookup here). ``dtypes`` are propagated, because ORT's saved graphs carry no value_info for its
    own com.microsoft ops: from initializers, graph inputs and the zero points of Q / QLinear nodes
    (enough to tell int8 from uint8 from float).
    """

    model: onnx.ModelProto
    nodes: list[onnx.NodeProto]
    initializers: dict[str, onnx.TensorProto]
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    consumers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    base_dir: Path | None = None  # where external initializers live when loaded lazily

    @property
    def opset(self) -> int:
        return ai_onnx_opset(self.model, 0)

    def is_constant(self, name: str) -> bool:
        return name in self.initializers

    def init_array(self, name: str) -> np.ndarray | None:
        """The value of an initializer or Constant (converted on each call: weights are not kept twice)."""
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

    def dtype_of_constant(self, name: str) -> str | None:
        t = self.initializers.get(name)
        return dtype_name(t.data_type) if t is not None else None


def graph_from_model(model: onnx.ModelProto) -> GraphIndex:
    g = model.graph
    nodes = list(g.node)
    inits = {t.name: t for t in g.initializer}
    for n in nodes:
        if n.op_type == "Constant" and is_onnx_domain(n.domain):
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    t = onnx.TensorProto()
                    t.CopyFrom(a.t)
                    t.name = n.output[0]
                    inits[n.output[0]] = t
    graph = GraphIndex(model=model, nodes=nodes, initializers=inits)
    for n in nodes:
        for o in n.output:
            if o:
                graph.producer[o] = n
        for i in n.input:
            if i:
                graph.consumers.setdefault(i, []).append(n)
    graph.dtypes = _propagate_dtypes(graph)
    return graph


def graph_from_path(path: Path | str, *, lazy: bool = False) -> GraphIndex:
    """``lazy``: external initializers stay on disk and are read one at a time when a summary needs
    one (a level graph of a 1 GB model is then summarized without holding its weights)."""
    if not lazy:
        return graph_from_model(onnx.load(str(path)))
    graph = graph_from_model(onnx.load(str(path), load_external_data=False))
    graph.base_dir = Path(path).parent
    return graph


def _propagate_dtypes(graph: GraphIndex) -> dict[str, str]:
    g = graph.model.graph
    dt: dict[str, str] = {}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            dt[vi.name] = dtype_name(vi.type.tensor_type.elem_type)
    for name, t in graph.initializers.items():
        dt[name] = dtype_name(t.data_type)
    for n in graph.nodes:  # ONNX and ORT-saved graphs are topologically sorted
        key = op_key(n)
        out_dt = None
        if key == QUANTIZE:
            if len(n.input) > 2 and n.input[2]:
                out_dt = dt.get(n.input[2])
            else:  # no zero point: opset 21's output_dtype decides, uint8 by default
                out_dt = dtype_name(attribute(n, "output_dtype")) if attribute(n, "output_dtype") else "uint8"
        elif key in FLOAT_OUTPUT_WITHOUT_SCALE and not (len(n.input) > FLOAT_OUTPUT_WITHOUT_SCALE[key]
                                                       and n.input[FLOAT_OUTPUT_WITHOUT_SCALE[key]]):
            out_dt = "float32"
        elif key in OUTPUT_ZERO_POINT_INDEX:
            idx = OUTPUT_ZERO_POINT_INDEX[key]
            out_dt = dt.get(n.input[idx]) if len(n.input) > idx and n.input[idx] else "uint8"
        elif key in _FIXED_OUT:
            out_dt = _FIXED_OUT[key]
        elif key == "Cast":
            to = attribute(n, "to")
            out_dt = dtype_name(to) if to else None
        elif key == "Where":
            out_dt = dt.get(n.input[1]) if len(n.input) > 1 else None
        else:
            first = next((i for i in n.input if i), None)
            out_dt = dt.get(first) if first else None
        for o in n.output:
            if o and o not in dt and out_dt is not None:
                dt[o] = out_dt
    return dt


@dataclass(frozen=True)
class Int8Coverage:
    """The compute ops of one graph, split by the arithmetic ORT runs them in (``int8_coverage``)."""

    int8_ops: dict[str, int]  # op key -> int8 compute kernels (INT8_COMPUTE_KERNELS)
    float_ops: dict[str, int]  # op key -> compute ops on float data (COMPUTE_OPS)

    @property
    def int8_count(self) -> int:
        return sum(self.int8_ops.values())

    @property
    def float_count(self) -> int:
        return sum(self.float_ops.values())

    @property
    def coverage(self) -> float | None:
        """int8 / (int8 + float); None for a graph without compute ops (nothing to cover)."""
        total = self.int8_count + self.float_count
        return self.int8_count / total if total else None


def int8_coverage(graph: GraphIndex) -> Int8Coverage:
    """The one ``int8_coverage`` of the report: counted over ORT's saved graph for a level (a file as
    written counts the same way), If/Loop/Scan bodies included.

    Counted in the graph ORT runs, never against the fp32 file: ORT inlines model-local functions and
    constant-folds a MatMul of two initializers (a weight stored as ``U @ V``), so the fp32 file holds
    other compute ops than the graph that runs. A COMPUTE_OPS node is float compute whatever the order
    of its inputs (``MatMul(W, x)`` counts), unless its operands are known to be integer (a MatMul of
    int64 shape values); a node inside a body has no propagated dtype and counts as float.
    """
    int8: Counter[str] = Counter()
    flt: Counter[str] = Counter()
    for n in all_nodes(graph.model.graph):
        key = op_key(n)
        if key in INT8_COMPUTE_KERNELS:
            int8[key] += 1
        elif key in COMPUTE_OPS:
            dtypes = [graph.dtypes.get(i) for i in n.input[:2] if i]
            if not dtypes or any(d is None or is_float(d) for d in dtypes):
                flt[key] += 1
    return Int8Coverage(int8_ops=dict(int8), float_ops=dict(flt))


# The metadata_props prefix the ONNX->torch converter stamps on every PT2E file node it made
# (quantize/pt2e_from_onnx/names.py): `<prefix>onnx_node`, `onnx_op`, `onnx_outputs` name the upload's node.
CONVERTER_METADATA_PREFIX = "quantcompare."
# On the nodes quantcompare's PT2E path appended in float after a selection (quantize/selection_tail.py):
# value = the selection it follows. ORT's saved graphs drop node metadata, so readers go by node name.
FLOAT_TAIL_KEY = CONVERTER_METADATA_PREFIX + "float_tail"


def float_tail_nodes(graph) -> dict[str, str]:
    """Node name -> the selection it follows, for the nodes marked FLOAT_TAIL_KEY in ``graph`` (a GraphIndex)."""
    return {n.name: p.value for n in graph.nodes for p in n.metadata_props if p.key == FLOAT_TAIL_KEY}
