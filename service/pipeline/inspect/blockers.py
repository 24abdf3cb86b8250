"""Why ORT left a node in float: the first condition of ORT's QDQ selectors that the node fails.

Read from the graph ORT saved for a level (``optimized_model_filepath``), the way ORT 1.32's
``QDQSelectorActionTransformer`` looks at it (``qdq_selector_action_transformer.cc`` registers one
selector per op type; ``qdq_selectors.cc`` holds the checks). What ORT decides before the selectors
run is already visible in the saved graph:

- ``EnsureUniqueDQForNodeUnit`` (before Level1 and inside it, ``inference_session.cc``) gives
  every reader of a shared DequantizeLinear its own copy, so one QuantizeLinear feeds N DQs.
- ``QDQS8ToU8Transformer`` (Level2, added only when ``QDQIsInt8Allowed()`` is false, i.e. every
  non-ARM CPU) turns a Q->DQ pair to uint8 only when the Q has exactly one reader
  (``CheckOutputEdges(graph, q, 1)``): a tensor read by two or more nodes stays int8.

So the dtypes, readers and Q/DQ placement in the saved ``extended`` graph are what the selector
saw. Checks follow the selector's own order, and the row names the first one that fails.
Levels above ``extended`` run no QDQ fusion; a node there keeps the blocker it had at
``extended`` (the layout passes rename Conv to ``nchwc.Conv`` and put Reorder nodes between it
and its DQ, which would hide the reason). A float Transpose that only a layout level has is
NhwcTransformer's (Level3): it wraps each QLinearConv it turns channels-last in Transposes and
pushes them with the transpose optimizer (``nhwc_transformer.cc``), which can leave one between a
DequantizeLinear and a QuantizeLinear that no QDQ rule will see.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import onnx

from service.schemas.options import LEVEL_VALUES
from service.pipeline.vocabulary import (
    ACTIVATIONS_ABSORBED_BY_Q, GraphIndex, INT8_KERNELS, QDQ_BINARY, QDQ_DROP, QDQ_DROP_NO16, QDQ_DROP_POSITIVE,
    QDQ_UNARY, SHAPE_READING_OPS, is_float, is_onnx_domain, op_key,
)
from service.schemas.advice import UnfusedNode

__all__ = ["BLOCKERS", "Blocker", "ExtendedRows", "grouped_blockers", "reasons_by_op", "rows_index", "unfused_by_level",
           "unfused_nodes"]


@dataclass(frozen=True)
class Blocker:
    code: str
    title: str  # what ORT checks, in one line
    fix: str  # what a user changes
    source: str  # where in ORT 1.32 the condition is


# The table docs/report.md documents. Codes are stable: CI jobs and the client key on them.
BLOCKERS: dict[str, Blocker] = {b.code: b for b in (
    Blocker("no_qdq_in_file", "no DequantizeLinear on its inputs and no QuantizeLinear on its output: "
            "the quantizer left it in float", "quantize this op (op_types_to_quantize / the quantizer's "
            "annotation); ORT never quantizes a float op by itself", "the file"),
    Blocker("no_int8_form", "no Q/DQ around it in the file, and ORT has no QDQ rule for this op type on the CPU "
            "EP either: it runs in float however it is quantized", "nothing to change here: Q/DQ around it would "
            "add an int8<->float round trip and no int8 kernel", "qdq_selector_action_transformer.cc (no selector "
            "registered for the op type)"),
    Blocker("not_in_xnnpack_config", "torchao's XNNPACK quantizer has no static pattern for this op: its STATIC_OPS "
            "annotate linear (a constant weight), conv (1-D and 2-D; a 3-D conv only together with the Relu "
            "after it), a ConvTranspose only together with the Relu after it, "
            "adaptive_avg_pool2d, add, mul, cat and GRU inputs/outputs",
            "nothing in PT2E's XNNPACK config quantizes it; the ORT paths do where quantize_static lists the op "
            "(a MatMul of two activations, a lone ConvTranspose, Sigmoid, Softmax, ...)",
            "torchao/testing/pt2e/_xnnpack_quantizer.py: XNNPACKQuantizer.STATIC_OPS; _xnnpack_quantizer_utils.py: "
            "_annotate_conv (conv1d, conv2d), _do_annotate_conv_relu (torchao/quantization/pt2e/utils.py _is_conv_node)"),
    Blocker("float_tail", "the upload's post-processing after a selection (NonMaxSuppression, NonZero, ...): "
            "quantcompare's PT2E path appends it in float as the upload wrote it, since torch.export has no form "
            "for an output whose shape depends on the values",
            "nothing: an int8 deployment runs its post-processing in float too",
            "quantcompare: service/pipeline/quantize/selection_tail.py"),
    Blocker("no_qdq_rule", "ORT has no QDQ fusion rule for this op type on the CPU EP: it runs in float "
            "between a DequantizeLinear and a QuantizeLinear", "nothing in ORT; leaving it out of "
            "quantization saves the int8<->float round trip", "qdq_selector_action_transformer.cc"),
    Blocker("fusion_starts_at_extended", "QDQ fusion is a Level2 transformer: it does not run at this level",
            "create the session at ORT_ENABLE_EXTENDED or above (ORT's default is ORT_ENABLE_ALL)",
            "graph_transformer_utils.cc: QDQSelectorActionTransformer in Level2"),
    Blocker("input_not_quantized", "an input has no DequantizeLinear: the selector needs one DQ per input",
            "quantize that input too", "qdq_selectors.cc: CheckQDQNodes, num_dq_inputs != dq_nodes.size()"),
    Blocker("no_q_on_output", "its output is not read by QuantizeLinear nodes only",
            "quantize its output (every reader should see a QuantizeLinear)",
            "qdq_selectors.cc: CheckQDQNodes, q_nodes empty or q_nodes.size() != GetOutputEdgesCount()"),
    Blocker("output_quantized_twice", "its output is read by several QuantizeLinear: the selector takes exactly "
            "one QuantizeLinear per output (what DedicatedQDQPair writes once CSE does not merge the copies)",
            "quantize each output once (one QuantizeLinear, its DequantizeLinear copies per reader)",
            "qdq_selectors.cc: CheckQDQNodes, num_outputs != q_nodes.size()"),
    Blocker("output_is_graph_output", "its output is also a graph output", "quantize the graph output, or "
            "output the dequantized value", "qdq_selectors.cc: CheckQDQNodes, NodeProducesGraphOutput"),
    Blocker("io_dtype_mismatch", "its input and output Q/DQ have different types (int8 vs uint8)",
            "quantize activations as uint8 on x86 (ORT: activation_type=uint8), so QDQS8ToU8Transformer has "
            "nothing to convert", "qdq_selectors.cc: dt_input != dt_output"),
    Blocker("int8_activation_on_x86", "int8 activations on a CPU where QDQIsInt8Allowed() is false: the "
            "Conv/MatMul selector refuses them", "quantize activations as uint8 on x86 (ORT: activation_type="
            "uint8)", "qdq_selectors.cc: ConvNodeGroupSelector/MatMulNodeGroupSelector, !int8_allowed_"),
    Blocker("weight_dtype_mismatch", "int8 activations need an int8 weight", "quantize weights as int8",
            "qdq_selectors.cc: dt_weight != dt_input"),
    Blocker("bias_not_int32", "the bias DequantizeLinear reads a type other than int32",
            "quantize the bias to int32 (scale = input scale x weight scale), or leave it float for ORT",
            "qdq_selectors.cc: dt_bias != INT32"),
    Blocker("bias_scale_mismatch", "the bias DequantizeLinear's scale is not input scale x weight scale: the "
            "fused QLinearConv would read the int32 bias at that scale, so ORT 1.32 keeps the Conv in float",
            "quantize the bias with this Conv's own scales; a bias initializer several Convs share gets one "
            "quantized copy from ORT's quantize_static, give each Conv its own copy first",
            "qdq_selectors.cc: ConvNodeGroupSelector::Check -> CheckConvBiasScale (onnxruntime PR 28229): per channel, "
            "|bias scale - input x weight scale| > 0.01 x |input x weight scale| + 1e-6 refuses the fusion"),
    Blocker("bias_zero_point_nonzero", "the bias DequantizeLinear has a zero point other than 0: the fused "
            "QLinearConv reads the int32 bias with an implied zero point of 0, so ORT 1.32 keeps the Conv in float",
            "quantize the bias symmetric (zero point 0, or none), as quantize_static and PT2E write it",
            "qdq_selectors.cc: ConvNodeGroupSelector::Check -> CheckConvBiasScale (onnxruntime PR 28229, added in "
            "review): the bias DQ's zero point must be absent or a constant int32 0"),
    Blocker("gemm_beta_not_one", "a Gemm with a quantized bias and beta other than 1: QGemm adds the int32 bias "
            "unscaled, so ORT keeps the Gemm in float", "fold beta into the bias before quantizing (beta=1), or "
            "leave the bias float", "qdq_selectors.cc: GemmNodeGroupSelector::Check, "
            "node.GetAttributes().at(\"beta\").f() != 1.0 when it has a bias DQ"),
    Blocker("int16_not_supported", "16-bit Q/DQ: this rule allows 8-bit types only",
            "quantize activations to 8 bits", "qdq_selectors.cc: !allow_16bit_"),
    Blocker("qdq_params_differ", "the rule drops the Q/DQ pair only when both carry the same constant scale "
            "and zero point", "give input and output the same quantization parameters",
            "qdq_selectors.cc: DropQDQNodeGroupSelector::Check -> IsQDQPairSupported (qdq_util.cc)"),
    Blocker("resize_not_nearest", "a Resize whose mode is 'linear' or 'cubic': ORT 1.32 drops the Q/DQ pair "
            "around a Resize only in mode 'nearest' (an interpolation does not commute with quantization), so it "
            "stays a float Resize between its Q/DQ", "nothing to gain from its Q/DQ in ORT: leave Resize out of "
            "op_types_to_quantize (one int8<->float round trip less), or use mode 'nearest' where the model "
            "tolerates it", "qdq_selectors.cc: DropQDQNodeGroupSelector::Check, a Resize whose 'mode' attribute is "
            "present and not \"nearest\" (onnxruntime PR 28414, issue 21319)"),
    Blocker("resize_tf_crop_and_resize", "a Resize whose coordinate_transformation_mode is 'tf_crop_and_resize': "
            "it writes extrapolation_value (a float) outside the crop box, so ORT 1.32 keeps its Q/DQ whatever the "
            "mode", "nothing to gain from its Q/DQ in ORT: leave this Resize out of op_types_to_quantize",
            "qdq_selectors.cc: DropQDQNodeGroupSelector::Check, a Resize whose coordinate_transformation_mode is "
            "\"tf_crop_and_resize\" (compiled into the 1.32.0 wheel, git fab30a4, right after the mode check)"),
    Blocker("scale_not_positive", "MaxPool/ReduceMax/ReduceMin need a positive constant scalar scale",
            "use a positive per-tensor scale", "qdq_selectors.cc: DropQDQNodeGroupSelector::Check, "
            "!allow_nonpositive_scale_ -> IsQOrDQScalePositiveConstantScalar (qdq_util.cc) on the QuantizeLinear"),
    Blocker("inserted_by_layout", "ORT put this Transpose here at a layout level: NhwcTransformer wraps every "
            "QLinearConv it runs channels-last in Transposes and pushes them with the transpose optimizer, after "
            "the QDQ fusions of level extended; no QDQ rule runs after it, so it moves float data",
            "nothing in the file holds it: compare this level's latency with extended's; where the neighbouring "
            "ops fuse too (uint8 activations on x86, no io_dtype_mismatch rows) the Transposes stay on 8-bit data",
            "nhwc_transformer.cc: NhwcTransformer::ApplyImpl (WrapTransposesAroundNode, Optimize); "
            "graph_transformer_utils.cc: NhwcTransformer in Level3"),
    Blocker("unexplained", "every condition modelled here holds, yet ORT left it in float",
            "run with ORT's verbose log to see the selector's decision", "-"),
)}

# Op type -> ORT 1.32 CPU EP selector kind (qdq_selector_action_transformer.cc).
# qdq_selector_action_transformer.cc registers {"MaxPool", {12, 22}} (onnxruntime PR 29201, issue 28770: it read
# {12} before): the rule matches MaxPool-12 and MaxPool-22 only, so a MaxPool of opset 11 or below (no 8-bit
# MaxPool in the ONNX schema before 12) keeps its Q/DQ (OP_VERSIONS, pinned in tests/pipeline/inspect/test_blockers.py).
RULE_KIND: dict[str, str] = {
    **{op: "drop" for op in QDQ_DROP}, **{op: "drop_no16" for op in QDQ_DROP_NO16},
    **{op: "drop_positive" for op in QDQ_DROP_POSITIVE}, **{op: "unary" for op in QDQ_UNARY},
    **{op: "binary" for op in QDQ_BINARY}, "Concat": "variadic", "Conv": "conv", "MatMul": "matmul",
    "Gemm": "gemm", "Split": "split", "Where": "where",
}
# ACTIVATIONS_ABSORBED_BY_Q have no selector of their own, yet a QuantizeLinear after them removes them:
# quantizing their output is the change that helps.
# The op versions (SinceVersion) a rule is registered for, where it names any; an op absent here matches at
# every version.
OP_VERSIONS = {"MaxPool": (12, 22)}
# ORT's layout/extended passes rename float ops; the selector saw the original one.
_BASE_OP = {"com.microsoft.FusedConv": "Conv", "com.microsoft.nchwc.Conv": "Conv",
            "com.microsoft.FusedMatMul": "MatMul", "com.microsoft.FusedGemm": "Gemm",
            "com.microsoft.nchwc.MaxPool": "MaxPool", "com.microsoft.nchwc.AveragePool": "AveragePool",
            "com.microsoft.nchwc.GlobalAveragePool": "GlobalAveragePool",
            "com.microsoft.nchwc.Upsample": "Resize", "com.microsoft.QuickGelu": "Mul"}
# ORT's own layout plumbing, not nodes of the model.
_PLUMBING = {"com.microsoft.nchwc.ReorderInput", "com.microsoft.nchwc.ReorderOutput"}
_NOT_COMPUTE = SHAPE_READING_OPS | {"Constant", "ConstantOfShape", "Identity", "Range"}
_QDQ = {"QuantizeLinear", "DequantizeLinear"}
_INT16 = {"int16", "uint16"}
class _View:
    """What the selector reads around one node: its DQ parents, Q children, readers, dtypes."""

    def __init__(self, graph: GraphIndex):
        self.g = graph
        self.graph_outputs = {o.name for o in graph.model.graph.output}

    def producer(self, name: str):
        return self.g.producer.get(name)

    def readers(self, name: str) -> list[onnx.NodeProto]:
        """One entry per input slot that reads ``name`` (ORT counts edges, not nodes)."""
        return [c for c in self.g.consumers.get(name, []) for i in c.input if i == name]

    def dtype(self, name: str) -> str | None:
        return self.g.dtypes.get(name)

    def is_const(self, name: str) -> bool:
        return name in self.g.initializers


def _is_dq(n) -> bool:
    return n is not None and n.op_type == "DequantizeLinear" and is_onnx_domain(n.domain)


def _is_q(n) -> bool:
    return n is not None and n.op_type == "QuantizeLinear" and is_onnx_domain(n.domain)


def _scalar(v: _View, name: str):
    a = v.g.init_array(name) if name else None
    return None if a is None or a.size != 1 else a.reshape(-1)[0]


# qdq_selectors.cc, CheckConvBiasScale (onnxruntime PR 28229), per output channel i: the fusion is refused when
# |b_scale[i] - x_scale * w_scale[i]| > 0.01f * |x_scale * w_scale[i]| + 1e-6f (the two constants read from the
# function compiled into the installed 1.32.0 wheel; PR 28229 describes the 1% relative tolerance). The test
# tests/pipeline/inspect/test_blockers.py::test_bias_scale_mismatch pins the edge on both sides of 1e-3.
BIAS_SCALE_RTOL, BIAS_SCALE_ATOL = 1e-2, 1e-6


def _bias_scale_off(v: _View, dq_x, dq_w, dq_b) -> float | None:
    """The largest relative distance of the bias DequantizeLinear's scale from input x weight scale
    (per channel) when some channel is past ORT's tolerance; None when all are within it, a scale is
    not a constant, or the shapes do not line up."""
    arrays = [v.g.init_array(dq.input[1]) if len(dq.input) > 1 else None for dq in (dq_x, dq_w, dq_b)]
    if any(a is None for a in arrays):
        return None
    s_x, s_w, s_b = (np.ravel(a).astype(np.float64) for a in arrays)
    if s_x.size != 1 or s_b.size not in (1, s_w.size):
        return None
    want = s_x * s_w
    if np.all(np.abs(s_b - want) <= BIAS_SCALE_RTOL * np.abs(want) + BIAS_SCALE_ATOL):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.nanmax(np.abs(s_b - want) / np.abs(want)))


def _bias_zero_point(v: _View, dq_b) -> str | None:
    """What is wrong with the bias DequantizeLinear's zero point for CheckConvBiasScale (absent, or a constant
    int32 of zeros, passes); None when it passes."""
    if len(dq_b.input) < 3 or not dq_b.input[2]:
        return None
    a = v.g.init_array(dq_b.input[2])
    if a is None:
        return "the bias zero point is not a constant"
    if a.dtype != np.int32:
        return f"the bias zero point is {a.dtype}"
    if np.any(a != 0):
        return f"bias zero point {int(np.ravel(a)[np.flatnonzero(np.ravel(a))[0]])}"
    return None


def _resize_blocker(n) -> tuple[str, str] | None:
    """DropQDQNodeGroupSelector::Check's Resize conditions (ORT 1.32): 'mode', when present, is "nearest";
    coordinate_transformation_mode is not "tf_crop_and_resize"."""
    attrs = {a.name: a.s.decode() for a in n.attribute if a.type == onnx.AttributeProto.STRING}
    if attrs.get("mode", "nearest") != "nearest":
        return "resize_not_nearest", f"mode {attrs['mode']!r}"
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        return "resize_tf_crop_and_resize", "coordinate_transformation_mode 'tf_crop_and_resize'"
    return None


def _since_version(op: str, opset: int) -> int | None:
    """The ONNX schema version a node of ``op`` in a graph of ``opset`` resolves to (SinceVersion, what ORT's
    rule lookup compares), from onnx's own schema registry; None where onnx has no such op."""
    try:
        return onnx.defs.get_schema(op, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def _why_dtype(v: _View, tensor: str, int8_allowed: bool) -> str:
    """Why a quantized tensor has the dtype it has in the saved graph, in QDQS8ToU8's terms."""
    dt = v.dtype(tensor) or "?"
    p = v.producer(tensor)
    readers = len(v.readers(tensor))
    if dt == "int8" and not int8_allowed and _is_q(p):
        if tensor in v.graph_outputs:
            return "int8 (graph output: QDQS8ToU8Transformer leaves it)"
        if readers > 1:
            return f"int8 (read by {readers} nodes: QDQS8ToU8Transformer converts single-reader Q/DQ only)"
        return "int8"
    if dt == "int8" and p is not None and not _is_q(p):
        return f"int8 (written by {op_key(p)} {p.name})"
    return dt


def _row(node, key: str, code: str, detail: str) -> UnfusedNode:
    return UnfusedNode(node=node.name or f"<{key}>", op_type=key, blocker=code, detail=detail,
                       fix=BLOCKERS[code].fix)


def _is_candidate(v: _View, n) -> bool:
    """A node of the model that computes on float: a float data input that is not a constant."""
    key = op_key(n)
    if key in _QDQ or key in INT8_KERNELS or key in _PLUMBING or n.op_type in _NOT_COMPUTE:
        return False
    data = [i for i in n.input if i and not v.is_const(i)]
    if not any(is_float(v.dtype(i)) for i in data):
        return False
    out = next((o for o in n.output if o), None)
    return out is None or v.dtype(out) is None or is_float(v.dtype(out))


def _check_qdq_nodes(v: _View, n, dqs, qs, num_dq: int, empty_q_ok: bool) -> tuple[str, str] | None:
    """``NodeGroupSelector::CheckQDQNodes`` + ``NodeGroup::CanCreateNodeGroup``."""
    actual = [i for i in n.input if i]
    if num_dq != len(dqs):
        missing = [i for i in actual[:num_dq] if not _is_dq(v.producer(i))]
        what = ", ".join(f"{i} ({'constant' if v.is_const(i) else v.dtype(i) or '?'})" for i in missing[:3])
        return "input_not_quantized", f"{len(dqs)} of {num_dq} inputs come from a DequantizeLinear; no DQ on: {what}"
    for dq in dqs:
        r = v.readers(dq.output[0])
        if len(r) != 1 or dq.output[0] in v.graph_outputs:
            others = [x.name for x in r if x is not n][:3]
            # EnsureUniqueDQForNodeUnit runs at every level (even disable_all) and gives each reader its
            # own copy, also when the DQ is a graph output (ensure_unique_dq_for_node_unit.cc,
            # EnsureUniqueDQForEachExplicitOutputEdge: can_reuse_original_dq is false then); it skips the edges
            # to a subgraph's implicit inputs, so only those can leave it shared.
            return "unexplained", (f"DequantizeLinear {dq.name} is read by {len(r)} nodes"
                                                    + (f" (also {', '.join(others)})" if others else "")
                                                    + (" and is a graph output" if dq.output[0] in v.graph_outputs
                                                       else ""))
    if not qs:
        if empty_q_ok:
            return None
        readers = [op_key(c) for o in n.output if o for c in v.readers(o)]
        return "no_q_on_output", "output read by " + (", ".join(sorted(set(readers))) or "nothing") + \
            ", no QuantizeLinear"
    outs = [o for o in n.output if o]
    edges = sum(len(v.readers(o)) for o in outs)
    if len(qs) == edges and len(qs) > len(outs):
        return "output_quantized_twice", f"output read by {len(qs)} QuantizeLinear nodes ({', '.join(q.name for q in qs[:3])})"
    if len(outs) != len(qs) or len(qs) != edges:
        others = sorted({op_key(c) for o in outs for c in v.readers(o) if not _is_q(c)})
        return "no_q_on_output", f"output read by {edges} nodes, {len(qs)} of them QuantizeLinear" + \
            (f" (also {', '.join(others)})" if others else "")
    if any(o in v.graph_outputs for o in outs):
        return "output_is_graph_output", "its output is a graph output as well as read by QuantizeLinear"
    return None


def _dq_in(v: _View, dq) -> str | None:
    return v.dtype(dq.input[0])


def _q_out(v: _View, q) -> str | None:
    return v.dtype(q.output[0])


def _mismatch(v: _View, dq, q, int8_allowed: bool) -> tuple[str, str]:
    return "io_dtype_mismatch", (f"input {_why_dtype(v, dq.input[0], int8_allowed)}, output "
                                 f"{_why_dtype(v, q.output[0], int8_allowed)}")


def _pair_supported(v: _View, q, dq) -> bool:
    """``IsQDQPairSupported``: constant scalar scale and zero point, equal on both sides."""
    qs, ds = _scalar(v, q.input[1]), _scalar(v, dq.input[1])
    qz = _scalar(v, q.input[2]) if len(q.input) > 2 and q.input[2] else 0
    dz = _scalar(v, dq.input[2]) if len(dq.input) > 2 and dq.input[2] else 0
    if qs is None or ds is None or qz is None or dz is None:
        return False
    return bool(np.float32(qs) == np.float32(ds) and int(qz) == int(dz))


# The selector kinds whose node group takes in a Relu/Clip after the node (GetQDQSelection).
_ABSORBS_ACTIVATION = frozenset({"conv", "matmul", "gemm", "binary", "unary"})


@dataclass(frozen=True)
class _Group:
    """What a selector checks around one node: the DequantizeLinear nodes it reads, and the QuantizeLinear
    nodes after it (or after the Relu/Clip that joins its group)."""

    v: _View
    n: onnx.NodeProto
    base: str
    kind: str
    dqs: list
    qs: list
    int8_allowed: bool

    def inputs(self) -> int:
        return len([i for i in self.n.input if i])

    def nodes(self, num_dq: int, *, empty_q_ok: bool = False) -> tuple[str, str] | None:
        return _check_qdq_nodes(self.v, self.n, self.dqs, self.qs, num_dq, empty_q_ok)

    def dq_type(self, i: int) -> str | None:
        return _dq_in(self.v, self.dqs[i])

    def q_type(self) -> str | None:
        return _q_out(self.v, self.qs[0])

    def mismatch(self, dq, q) -> tuple[str, str]:
        return _mismatch(self.v, dq, q, self.int8_allowed)


def _selector_blocker(v: _View, n, base: str, kind: str, int8_allowed: bool) -> tuple[str, str] | None:
    """The first check of the op's selector that fails on this node, or None if all pass."""
    dqs = [v.producer(i) for i in n.input if i and _is_dq(v.producer(i))]
    # GetQDQSelection: a Relu/Clip that is the only reader and whose Q makes it redundant joins the group.
    readers = [c for o in n.output if o for c in v.readers(o)]
    qnode_src = n
    if len(readers) == 1 and readers[0].op_type in ACTIVATIONS_ABSORBED_BY_Q and len(v.readers(readers[0].output[0])) == 1 \
            and readers[0].output[0] not in v.graph_outputs and kind in _ABSORBS_ACTIVATION:
        qnode_src = readers[0]
    qs = [c for o in qnode_src.output if o for c in v.readers(o) if _is_q(c)]
    return _SELECTORS[kind](_Group(v, n, base, kind, dqs, qs, int8_allowed))


def _one_input_nodes(u: _Group) -> tuple[str, str] | None:
    """``CheckQDQNodes`` of the one-input selectors: the DequantizeLinear on input 0 alone counts."""
    dqs = u.dqs[:1] if u.dqs and _is_dq(u.v.producer(u.n.input[0])) else []
    return _check_qdq_nodes(u.v, u.n, dqs, u.qs, 1, False)


def _same_type_around(u: _Group) -> tuple[str, str] | None:
    return u.mismatch(u.dqs[0], u.qs[0]) if u.dq_type(0) != u.q_type() else None


def _drop_blocker(u: _Group) -> tuple[str, str] | None:
    """``DropQDQNodeGroupSelector`` (kinds drop; drop_no16: 8-bit only; drop_positive: a positive scale):
    the Q/DQ around the node go, so they must be one pair."""
    hit = _one_input_nodes(u) or _same_type_around(u)
    if hit:
        return hit
    din = u.dq_type(0)
    if u.kind in ("drop_no16", "drop_positive") and din in _INT16:
        return "int16_not_supported", f"{din} Q/DQ"
    if u.base == "Resize":
        # DropQDQNodeGroupSelector::Check tests a Resize's attributes after the dtypes and before the
        # scales: an absent 'mode' is ONNX's default, nearest.
        hit = _resize_blocker(u.n)
        if hit:
            return hit
    if u.kind == "drop_positive":
        s = _scalar(u.v, u.qs[0].input[1])
        if s is None or not s > 0:
            return "scale_not_positive", "the QuantizeLinear's scale is not a positive constant scalar"
    if not _pair_supported(u.v, u.qs[0], u.dqs[0]):
        return "qdq_params_differ", (f"input scale {_scalar(u.v, u.dqs[0].input[1])}, output scale "
                                     f"{_scalar(u.v, u.qs[0].input[1])}")
    return None


def _unary_blocker(u: _Group) -> tuple[str, str] | None:
    """``UnaryNodeGroupSelector``: one type in and out, 8-bit."""
    hit = _one_input_nodes(u) or _same_type_around(u)
    if hit:
        return hit
    din = u.dq_type(0)
    return ("int16_not_supported", f"{din} Q/DQ") if din in _INT16 else None


def _split_blocker(u: _Group) -> tuple[str, str] | None:
    """``SplitNodeGroupSelector``: each output's QuantizeLinear the input's type, scale and zero point."""
    hit = _one_input_nodes(u)
    if hit:
        return hit
    bad = [q for q in u.qs if _q_out(u.v, q) != u.dq_type(0)]
    if bad:
        return u.mismatch(u.dqs[0], bad[0])
    if any(not _pair_supported(u.v, q, u.dqs[0]) for q in u.qs):
        return "qdq_params_differ", "a QuantizeLinear after it has another scale or zero point than its input"
    return None


def _binary_blocker(u: _Group) -> tuple[str, str] | None:
    """``BinaryNodeGroupSelector``, ``VariadicNodeGroupSelector`` (Concat), ``WhereNodeGroupSelector``:
    every quantized input and the output of one 8-bit type."""
    hit = u.nodes(2 if u.kind == "where" else u.inputs())
    if hit:
        return hit
    ins = [_dq_in(u.v, d) for d in u.dqs]
    outs = [_q_out(u.v, q) for q in u.qs]
    if len(set(ins)) > 1:
        kinds = "; ".join(f"{d.input[0]}: {_why_dtype(u.v, d.input[0], u.int8_allowed)}" for d in u.dqs[:4])
        return "io_dtype_mismatch", f"inputs of different types: {kinds}"
    if len(set(outs)) > 1 or ins[0] != outs[0]:
        return u.mismatch(u.dqs[0], u.qs[0])
    if ins[0] in _INT16:
        return "int16_not_supported", f"{ins[0]} Q/DQ"
    return None


def _weight_type_differs(din: str | None, dw: str | None) -> tuple[str, str] | None:
    return ("weight_dtype_mismatch", f"activation int8, weight {dw}") if din == "int8" and dw != din else None


def _int16_pair(din: str | None, dw: str | None) -> tuple[str, str] | None:
    return ("int16_not_supported", f"activation {din}, weight {dw}") if din in _INT16 or dw in _INT16 else None


def _int8_on_x86(u: _Group, din: str | None, output: bool) -> tuple[str, str] | None:
    if din != "int8" or u.int8_allowed:
        return None
    out = f", output {_why_dtype(u.v, u.qs[0].output[0], u.int8_allowed)}" if output else ""
    return "int8_activation_on_x86", (f"input {_why_dtype(u.v, u.dqs[0].input[0], u.int8_allowed)}{out}; "
                                      "QDQIsInt8Allowed() is false on this CPU")


def _conv_bias(u: _Group) -> tuple[str, str] | None:
    """The Conv's bias: int32, at input scale x weight scale, zero point 0."""
    if len(u.dqs) != 3:
        return None
    if u.dq_type(2) != "int32":
        return "bias_not_int32", f"bias DequantizeLinear reads {u.dq_type(2)}"
    off = _bias_scale_off(u.v, *u.dqs)
    if off is not None:
        return "bias_scale_mismatch", f"bias scale {off:.0%} from input scale x weight scale"
    zp = _bias_zero_point(u.v, u.dqs[2])
    return ("bias_zero_point_nonzero", zp) if zp is not None else None


def _conv_blocker(u: _Group) -> tuple[str, str] | None:
    """``ConvNodeGroupSelector``: activation, weight and bias types, and the bias's scale and zero point."""
    hit = u.nodes(u.inputs())
    if hit:
        return hit
    din, dw = u.dq_type(0), u.dq_type(1)
    if din != u.q_type():
        return u.mismatch(u.dqs[0], u.qs[0])
    return (_int8_on_x86(u, din, output=True) or _weight_type_differs(din, dw) or _conv_bias(u)
            or _int16_pair(din, dw))


def _matmul_blocker(u: _Group) -> tuple[str, str] | None:
    """``MatMulNodeGroupSelector``: two quantized inputs, their types checked before the output's Q."""
    if len(u.dqs) != 2:
        return u.nodes(2) or ("input_not_quantized", "needs 2 DequantizeLinear")
    din, dw = u.dq_type(0), u.dq_type(1)
    hit = _int8_on_x86(u, din, output=False) or _weight_type_differs(din, dw) or _int16_pair(din, dw) or u.nodes(2)
    if hit:
        return hit
    return u.mismatch(u.dqs[0], u.qs[0]) if din != u.q_type() else None


def _gemm_blocker(u: _Group) -> tuple[str, str] | None:
    """``GemmNodeGroupSelector``: the output may stay float; beta 1 and an int32 bias when it is quantized."""
    hit = u.nodes(u.inputs(), empty_q_ok=True)
    if hit:
        return hit
    da, db = u.dq_type(0), u.dq_type(1)
    hit = _weight_type_differs(da, db)
    if hit:
        return hit
    if u.qs and da != u.q_type():
        return u.mismatch(u.dqs[0], u.qs[0])
    hit = _int16_pair(da, db)
    if hit:
        return hit
    beta = next((a.f for a in u.n.attribute if a.name == "beta"), 1.0)
    if len(u.dqs) == 3 and beta != 1.0:
        return "gemm_beta_not_one", f"beta {beta:g}"
    if len(u.dqs) == 3 and u.dq_type(2) != "int32":
        return "bias_not_int32", f"bias DequantizeLinear reads {u.dq_type(2)}"
    return None


# RULE_KIND's kinds -> the check of ORT's selector for that kind (qdq_selectors.cc).
_SELECTORS = {"drop": _drop_blocker, "drop_no16": _drop_blocker, "drop_positive": _drop_blocker,
              "unary": _unary_blocker, "split": _split_blocker, "binary": _binary_blocker,
              "variadic": _binary_blocker, "where": _binary_blocker, "conv": _conv_blocker,
              "matmul": _matmul_blocker, "gemm": _gemm_blocker}


def _has_qdq(v: _View, n) -> bool:
    if any(_is_dq(v.producer(i)) for i in n.input if i):
        return True
    return any(_is_q(c) for o in n.output if o for c in v.readers(o))


# ONNX op types of what torchao's XNNPACK quantizer annotates (STATIC_OPS: linear, conv, conv_transpose_relu,
# adaptive_avg_pool2d, gru_io_only, add, mul, cat) or lets share its input's observer
# (_xnnpack_quantizer_utils._is_share_obs_or_fq_op: relu, hardtanh, max_pool2d, mean, permute, squeeze,
# view, slice, flatten). Any other op's output gets no QuantizeLinear in a PT2E file.
XNNPACK_QUANTIZED_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "GlobalAveragePool", "AveragePool", "GRU", "Add",
                         "Mul", "Concat", "Relu", "Clip", "MaxPool", "ReduceMean", "Transpose", "Squeeze", "Reshape",
                         "Slice", "Flatten"}


def _not_in_xnnpack_config(v: _View, n, base: str) -> str | None:
    """Why torchao's XNNPACK quantizer wrote no Q/DQ around ``n`` in a PT2E file, where its pattern
    list decides it (pinned in tests/pipeline/inspect/test_blockers.py); None where it does not."""
    data = [i for i in n.input if i and not v.is_const(i)]
    if base == "MatMul" and len(data) == 2:
        return "a matmul of two activations: XNNPACK annotates linear (a constant weight), not matmul/bmm"
    if base == "ConvTranspose":
        readers = sorted({r.op_type for o in n.output if o for r in v.readers(o)})
        return ("a ConvTranspose not followed by a Relu (read by " + (", ".join(readers) or "the graph output")
                + "): XNNPACK's static config annotates conv_transpose_relu only")
    weight = v.g.initializers.get(n.input[1]) if base == "Conv" and len(n.input) > 1 else None
    if weight is not None and len(weight.dims) == 5:
        # torchao/testing/pt2e/_xnnpack_quantizer_utils.py: _annotate_conv ("conv") matches aten.conv1d and
        # aten.conv2d only; _do_annotate_conv_relu ("conv_relu") takes any conv torchao/quantization/pt2e/utils.py
        # _is_conv_node knows, conv3d included, but only with a Relu as the conv's one reader.
        readers = sorted({r.op_type for o in n.output if o for r in v.readers(o)})
        return ("a 3-D convolution not followed by a Relu (read by " + (", ".join(readers) or "the graph output")
                + "): XNNPACK's 'conv' pattern annotates conv1d and conv2d only; a conv3d is quantized only through "
                "'conv_relu', with a Relu as its one reader")
    return None


@dataclass(frozen=True)
class ExtendedRows:
    """What the layout levels need of the ``extended`` graph: its rows, by node name and by the first
    data input they read (``_previous_row``), and the names of all its nodes."""

    rows: dict[str, UnfusedNode]
    nodes: frozenset[str]


def unfused_nodes(graph: GraphIndex, *, level: str, int8_allowed: bool,
                  previous: ExtendedRows | None = None, pt2e: bool = False,
                  float_tail: dict[str, str] | None = None) -> list[UnfusedNode]:
    """One row per node of the model that ORT runs in float in ``graph`` (saved at ``level``).

    ``previous``: the ``extended`` graph's rows (``rows_index``); levels above it run no QDQ
    fusion, so a node they only renamed or re-laid out keeps that reason, and a float Transpose
    that graph did not have is NhwcTransformer's. ``pt2e``: the graph is of
    a PT2E file, where an op the XNNPACK quantizer has no pattern for says so. ``float_tail``: node
    name -> selection, for the nodes the PT2E path kept in float after it (``float_tail_nodes``).
    """
    v = _View(graph)
    level_value = LEVEL_VALUES.get(level, 99)
    rows = []
    heads: list[tuple[int, onnx.NodeProto]] = []
    above_extended = previous is not None and level_value > LEVEL_VALUES["extended"]
    channels_last = above_extended and _runs_channels_last(graph)
    for n in graph.nodes:
        if not _is_candidate(v, n):
            continue
        key = op_key(n)
        if channels_last and key == "Transpose" and n.name not in previous.nodes:
            # Before the extended rows: a new Transpose reads a tensor some extended row read too.
            rows.append(_row(n, key, "inserted_by_layout", f"not in the extended graph: {_neighbours(v, n)}"))
            continue
        prev = _previous_row(v, n, previous) if above_extended else None
        if prev is not None:
            prev = prev.model_copy(update={"node": n.name})
            rows.append(prev.model_copy(update={"op_type": key}) if prev.op_type != key else prev)
            continue
        base = _BASE_OP.get(key, key)
        kind = RULE_KIND.get(base)
        rule_name = base
        since = _since_version(base, graph.opset) if base in OP_VERSIONS else None
        if since is not None and since not in OP_VERSIONS[base]:
            kind, rule_name = None, f"{base}-{since} (the rule is registered for {base}-" + \
                "/".join(str(x) for x in OP_VERSIONS[base]) + " only)"
        if float_tail and n.name in float_tail:
            rows.append(_row(n, key, "float_tail", f"after {float_tail[n.name]}"))
            continue
        if not _has_qdq(v, n):
            why = _not_in_xnnpack_config(v, n, base) if pt2e else None
            if why:
                rows.append(_row(n, key, "not_in_xnnpack_config", why))
            elif kind is None and base not in ACTIVATIONS_ABSORBED_BY_Q:
                rows.append(_row(n, key, "no_int8_form", f"no Q/DQ in the file; no rule for {rule_name}"))
            else:
                rows.append(_row(n, key, "no_qdq_in_file", "no DequantizeLinear before it, no QuantizeLinear after it"))
            continue
        if pt2e and kind is not None and base not in XNNPACK_QUANTIZED_OPS \
                and not any(_is_q(c) for o in n.output if o for c in v.readers(o)):
            # The DequantizeLinear before it is its producer's output quantization: no Q after it to ask for.
            rows.append(_row(n, key, "not_in_xnnpack_config", f"no pattern for {base}: the XNNPACK config quantizes "
                             "what feeds it, not its output"))
            continue
        if kind is None:
            unit = _unit_head(v, n)
            if unit is not None:
                # A Relu/Clip between a Conv/MatMul/... and its QuantizeLinear joins that node's unit
                # (GetQDQSelection's redundant clip): it stays float for the same reason the head does.
                heads.append((len(rows), unit))
                rows.append(_row(n, key, "no_qdq_rule", f"part of {unit.name}'s unit"))
                continue
            rows.append(_row(n, key, "no_qdq_rule", f"no rule for {rule_name}"))
            continue
        if level_value < LEVEL_VALUES["extended"]:
            rows.append(_row(n, key, "fusion_starts_at_extended", f"{level} runs no QDQ fusion; "
                             f"{base} has a rule from extended on"))
            continue
        hit = _selector_blocker(v, n, base, kind, int8_allowed)
        if hit is None:
            rows.append(_row(n, key, "unexplained", f"{base} selector ({kind}) conditions all hold here"))
        else:
            rows.append(_row(n, key, *hit))
    by_node = {r.node: r for r in rows}
    for i, head in heads:
        h = by_node.get(head.name)
        if h is not None:
            rows[i] = rows[i].model_copy(update={"blocker": h.blocker, "fix": h.fix,
                                                 "detail": f"part of {head.name}'s unit: {h.detail}"})
    return rows


def _unit_head(v: _View, n) -> onnx.NodeProto | None:
    """The node whose QDQ unit a Relu/Clip belongs to: its input's producer has a rule, the Relu/Clip is
    that producer's only reader, and the Relu/Clip's only reader is a QuantizeLinear."""
    if n.op_type not in ACTIVATIONS_ABSORBED_BY_Q or not n.input:
        return None
    p = v.producer(n.input[0])
    if p is None or RULE_KIND.get(_BASE_OP.get(op_key(p), op_key(p))) not in ("conv", "matmul", "gemm", "binary",
                                                                            "unary"):
        return None
    if len(v.readers(n.input[0])) != 1:
        return None
    readers = v.readers(n.output[0])
    return p if len(readers) == 1 and _is_q(readers[0]) else None


def _runs_channels_last(graph: GraphIndex) -> bool:
    """NhwcTransformer ran here: a com.microsoft QLinearConv (or other node) with channels_last=1."""
    return any(n.domain == "com.microsoft" and any(a.name == "channels_last" and a.i == 1 for a in n.attribute)
               for n in graph.nodes)


def _neighbours(v: _View, n) -> str:
    p = v.producer(n.input[0]) if n.input else None
    readers = sorted({r.op_type for o in n.output if o for r in v.readers(o)})
    return f"{p.op_type if p is not None else 'a graph input'} -> Transpose -> {', '.join(readers) or 'a graph output'}"


def _previous_row(v: _View, n, previous: ExtendedRows) -> UnfusedNode | None:
    """The extended row of the node a layout pass rewrote: same name, NchwcTransformer's
    ``<name>_nchwc``, or the node that read the same tensor before a ReorderInput was put in between."""
    name = n.name[:-len("_nchwc")] if n.name.endswith("_nchwc") else n.name
    if name in previous.rows:
        return previous.rows[name]
    first = next((i for i in n.input if i), None)
    p = v.producer(first) if first else None
    if p is not None and op_key(p) in _PLUMBING and p.input:
        first = p.input[0]
    return previous.rows.get(f"input:{first}")


def rows_index(rows: list[UnfusedNode], graph: GraphIndex) -> ExtendedRows:
    """Extended rows by node name and by the first data input they read (see ``_previous_row``)."""
    out = {r.node: r for r in rows}
    by_name = {n.name: n for n in graph.nodes}
    for r in rows:
        n = by_name.get(r.node)
        first = next((i for i in n.input if i), None) if n is not None else None
        if first:
            out.setdefault(f"input:{first}", r)
    return ExtendedRows(rows=out, nodes=frozenset(by_name))


def unfused_by_level(graphs: dict[str, GraphIndex], *, int8_allowed: bool) -> dict[str, list[UnfusedNode]]:
    """``graphs``: level -> ORT's saved graph, in level order. Rows per level."""
    out: dict[str, list[UnfusedNode]] = {}
    extended: ExtendedRows | None = None
    for level in sorted(graphs, key=lambda lv: LEVEL_VALUES.get(lv, 99)):
        rows = unfused_nodes(graphs[level], level=level, int8_allowed=int8_allowed, previous=extended)
        out[level] = rows
        if level == "extended":
            extended = rows_index(rows, graphs[level])
    return out


def _phrase(row: UnfusedNode) -> str:
    """The part of a row's detail that groups well ("read by 2 nodes" stays, node names go)."""
    if row.blocker == "io_dtype_mismatch" and row.detail.startswith("inputs of different types"):
        # "inputs of different types: <tensor>: <dtype> (<why>); <tensor>: <dtype>": the dtypes group
        dtypes = {seg.split(": ", 1)[1].split(" ")[0] for seg in row.detail.split(": ", 1)[1].split("; ") if ": " in seg}
        return "inputs " + " and ".join(sorted(dtypes)) + " mixed"
    if row.blocker in ("io_dtype_mismatch", "int8_activation_on_x86"):
        d = row.detail
        parts = []
        for side in ("input", "output"):
            i = d.find(side + " ")
            if i < 0:
                continue
            seg = d[i + len(side) + 1:].split(",")[0].split(";")[0]
            if seg.startswith("int8 (read by"):
                n = seg.split("read by ")[1].split(" ")[0]
                parts.append(f"{side} read by {n} nodes stays int8")
            elif seg.startswith("uint8"):
                parts.append(f"{side} became uint8" if "int8" in d else f"{side} uint8")
            else:
                parts.append(f"{side} {seg.split(' (')[0]}")
        if parts:
            return " while ".join(parts) if row.blocker == "io_dtype_mismatch" else " and ".join(parts)
    return BLOCKERS[row.blocker].title.split(":")[0]


def grouped_blockers(rows: list[UnfusedNode]) -> list[tuple[int, str, str, str, str]]:
    """(count, op_type, blocker, phrase, fix), largest groups first."""
    c: Counter = Counter((r.op_type, r.blocker, _phrase(r), r.fix) for r in rows)
    return [(k, op, code, phrase, fix) for (op, code, phrase, fix), k in
            sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]


def reasons_by_op(rows: list[UnfusedNode]) -> dict[str, str]:
    """op_type -> one line: the blockers of its float nodes, most frequent first, with ORT's condition."""
    by_op: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        by_op[r.op_type][r.blocker] += 1
    out = {}
    for op, c in by_op.items():
        parts = [f"{code}{'' if n == 1 else f' x{n}'}: {BLOCKERS[code].title}" for code, n in c.most_common()]
        out[op] = "; ".join(parts)
    return out
