"""What a file writes: Q/DQ parameters, weight and bias storage, quantized vs float ops, int8 kernels.

Everything here is read from the ONNX file itself (initializers, Constant nodes, attributes),
never from what the tool was asked to do: the point is to show what each tool actually wrote.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from service.pipeline.files import external_data_bytes, file_sha256, repeated_initializers
from service.pipeline.vocabulary import (
    ACTIVATIONS_ABSORBED_BY_Q, ACTIVATIONS_ABSORBED_BY_Q_ORDER, BIAS_COPY_MARK, COMPUTE_OPS, DEQUANTIZE,
    GraphIndex, QDQ_OPS, QLINEAR_BIAS_INDEX, QLINEAR_OPERANDS, QUANTIZE, QUANTIZED_KERNELS, SYMMETRIC_ZERO_POINT,
    all_nodes, attribute, dtype_name, graph_from_model, is_float, is_onnx_domain, op_key,
)
from service.schemas.report import (
    BiasInfo,
    FileInfo,
    FoldedActivation,
    QuantizationInventory,
    QuantizedTensor,
    RepeatedGroup,
    RepeatedInitializers,
)

_COMPUTE_WITH_BIAS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}
_STRUCTURAL = {"Constant", "Identity"}


# What of a file's free-text metadata the report repeats (per file: fp32 and both ORT files carry the
# upload's). The file keeps all of it; a 10 MB metadata_props must not become 30 MB of report and page.
MAX_METADATA_PROPS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 32, 200, 2000


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} ... [{len(text) - limit} more characters in the file]"


def _metadata_shown(model) -> tuple[dict[str, str], int]:
    """The first ``MAX_METADATA_PROPS`` entries, keys and values shortened; and how many were left out."""
    props = list(model.metadata_props)
    shown = {_shortened(p.key, MAX_METADATA_KEY): _shortened(p.value, MAX_METADATA_VALUE)
             for p in props[:MAX_METADATA_PROPS]}
    return shown, max(0, len(props) - MAX_METADATA_PROPS)


def file_info_from_onnx(path: Path, model, *, relative_to: Path | None = None) -> FileInfo:
    metadata, left_out = _metadata_shown(model)
    data = external_data_bytes(model, path.parent)
    return FileInfo(
        path=str(path.relative_to(relative_to)) if relative_to else path.name,
        size=path.stat().st_size + data,
        external_data_bytes=data,
        sha256=file_sha256(path),
        producer_name=_shortened(model.producer_name, MAX_METADATA_KEY),
        producer_version=_shortened(model.producer_version, MAX_METADATA_KEY),
        ir_version=model.ir_version,
        opset_imports={(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        metadata_props=metadata,
        metadata_props_left_out=left_out,
        node_count=sum(1 for _ in all_nodes(model.graph)),
        repeated_initializers=_repeated_summary(model, path.parent),
    )


def _repeated_summary(model, base_dir: Path) -> RepeatedInitializers | None:
    groups = repeated_initializers(model, base_dir)
    if not groups:
        return None
    def from_bias_copies(g) -> bool:  # the first reader keeps the bias's own name, the others are copies
        return sum(BIAS_COPY_MARK not in n for n in g.names) <= 1

    return RepeatedInitializers(
        groups=len(groups), extra_copies=sum(len(g.names) - 1 for g in groups),
        extra_bytes=sum((len(g.names) - 1) * g.nbytes for g in groups),
        extra_bytes_from_bias_copies=sum((len(g.names) - 1) * g.nbytes for g in groups if from_bias_copies(g)),
        largest=[RepeatedGroup(copies=len(g.names), bytes_each=g.nbytes,
                               names=[_shortened(n, MAX_METADATA_KEY) for n in g.names[:4]]) for g in groups[:5]],
    )


def _params(g: GraphIndex, node, scale_idx: int, zp_idx: int):
    scale = g.init_array(node.input[scale_idx]) if len(node.input) > scale_idx and node.input[scale_idx] else None
    zp = g.init_array(node.input[zp_idx]) if len(node.input) > zp_idx and node.input[zp_idx] else None
    if zp is not None:
        dtype = zp.dtype.name
    else:
        out_dt = attribute(node, "output_dtype")  # opset 21 QuantizeLinear without zero point
        dtype = dtype_name(out_dt) if out_dt else "uint8"  # without either, QuantizeLinear writes uint8
        zp = np.zeros_like(scale, dtype=np.int64) if scale is not None else np.zeros(1, dtype=np.int64)
    scale = np.atleast_1d(np.asarray(scale if scale is not None else [np.nan], dtype=np.float64))
    zp = np.atleast_1d(np.asarray(zp)).astype(np.int64)
    return scale, zp, dtype


def _kernel_weight_axis(node, weight: np.ndarray | None, channels: int) -> int:
    """The axis a QOperator kernel's per-channel weight scales run along: the output channel, which
    is axis 0 of a QLinearConv weight [M, C, kH, kW], the last axis of a QLinearMatMul B [K, N], and
    for QGemm axis 0 with transB=1 ([N, K]) or 1 without. Checked against the weight's shape."""
    if node.op_type == "QLinearMatMul":
        axis = weight.ndim - 1 if weight is not None else 1
    elif node.op_type == "QGemm":
        axis = 0 if attribute(node, "transB", 0) else 1
    else:
        axis = 0
    if weight is not None and weight.ndim > axis and weight.shape[axis] != channels:
        matches = [i for i, d in enumerate(weight.shape) if d == channels]
        if len(matches) == 1:
            axis = matches[0]
    return axis


def _tensor(name, role, g, node, scale_idx, zp_idx, storage, consumers) -> QuantizedTensor:
    scale, zp, dtype = _params(g, node, scale_idx, zp_idx)
    per_channel = scale.size > 1
    axis = attribute(node, "axis", 1) if per_channel and node.op_type in QDQ_OPS else None
    if per_channel and node.op_type not in QDQ_OPS:
        axis = _kernel_weight_axis(node, g.init_array(name), scale.size)
    block = attribute(node, "block_size") if node.op_type in QDQ_OPS else None
    mid = SYMMETRIC_ZERO_POINT.get(dtype, 0)
    return QuantizedTensor(
        name=name, role=role, dtype=dtype, scale=[float(s) for s in scale.ravel()],
        zero_point=[int(z) for z in zp.ravel()], axis=axis, block_size=block or None, per_channel=per_channel,
        symmetric=bool(np.all(zp == mid)), storage=storage, written_by=op_key(node), consumers=consumers,
    )


def inventory_from_onnx(model, *, fp32_histogram: dict[str, int] | None = None,
                        index: GraphIndex | None = None) -> QuantizationInventory:
    """Inventory of the main graph (quantization parameters live there for every tool we compare).

    Each format's classifier adds what its nodes write: Q/DQ pairs (``_qdq_tensors``, ``_qdq_biases``),
    QOperator kernels (``_qoperator_tensors``), quantize_dynamic's integer kernels (``_integer_weights``).
    ``index``: the model's graph index when the caller has built it already."""
    g = index if index is not None else graph_from_model(model)
    nodes = g.nodes
    tensors: dict[str, QuantizedTensor] = {}  # a tensor's first writer names it (Q/DQ before QOperator)
    _qdq_tensors(g, tensors)
    biases = _qoperator_tensors(g, tensors) + _qdq_biases(g)
    ops_quantized, ops_float, reasons, float_weights = _classify_ops(g, nodes)
    hist = Counter(op_key(n) for n in all_nodes(model.graph))
    kernels = {k: v for k, v in sorted(hist.items()) if k in QUANTIZED_KERNELS}
    tlist = sorted(tensors.values(), key=lambda t: (t.role, t.name))
    weights = [t for t in tlist if t.role == "weight"]
    integer_weights = _integer_weights(g)
    # the stored dtype: a quantizer that took a shared bias for an activation wrote it as int8
    bias_dtypes = {b.dtype if b.quantized_in_file else "float32" for b in biases}
    n_q, n_dq = hist.get(QUANTIZE, 0), hist.get(DEQUANTIZE, 0)
    return QuantizationInventory(
        format=_file_format(kernels, ops_quantized, n_q + n_dq), quantize_linear=n_q, dequantize_linear=n_dq,
        tensors=tlist, weights=_weight_summary(weights, integer_weights, float_weights),
        bias=biases, bias_summary=_summary(bias_dtypes), ops_quantized=dict(sorted(ops_quantized.items())),
        ops_float=dict(sorted(ops_float.items())), ops_float_reasons=reasons, int8_kernels_in_file=kernels,
        folded_activations=_folded_activations(fp32_histogram, hist),
        activation_dtypes=sorted({t.dtype for t in tlist if t.role == "activation"}),
        weight_dtypes=sorted({t.dtype for t in weights} | integer_weights),
    )


def _consumers_of(g: GraphIndex, tensor: str) -> list[str]:
    return sorted({op_key(c) for c in g.consumers.get(tensor, [])})


def _qdq_tensors(g: GraphIndex, tensors: dict[str, QuantizedTensor]) -> None:
    """QDQ format: Q/DQ pairs, and DequantizeLinear of stored integer tensors."""
    for node in g.nodes:
        if node.op_type == QUANTIZE:
            x = node.input[0]
            role = "weight" if g.is_constant(x) else "activation"
            storage = "float_initializer_plus_quantize" if role == "weight" else "runtime"
            dq_outs = [c.output[0] for c in g.consumers.get(node.output[0], []) if c.op_type == DEQUANTIZE]
            cons = sorted({k for o in dq_outs for k in _consumers_of(g, o)}) or _consumers_of(g, node.output[0])
            tensors.setdefault(x, _tensor(x, role, g, node, 1, 2, storage, cons))
        elif node.op_type == DEQUANTIZE:
            src = node.input[0]
            if g.is_constant(src):
                dtype = g.dtype_of_constant(src)
                cons_nodes = g.consumers.get(node.output[0], [])
                is_bias = dtype == "int32" or any(
                    _COMPUTE_WITH_BIAS.get(c.op_type) is not None and len(c.input) > 2 and c.input[2] == node.output[0]
                    for c in cons_nodes)
                role = "bias" if is_bias else "weight"
                tensors.setdefault(node.output[0], _tensor(
                    node.output[0], role, g, node, 1, 2, "quantized_initializer", _consumers_of(g, node.output[0])))
            elif src not in g.producer or g.producer[src].op_type != QUANTIZE:
                # Already-quantized data arriving from a graph input or an int8 kernel.
                tensors.setdefault(src, _tensor(src, "activation", g, node, 1, 2, "runtime",
                                                _consumers_of(g, node.output[0])))


def _qoperator_tensors(g: GraphIndex, tensors: dict[str, QuantizedTensor]) -> list[BiasInfo]:
    """QOperator format: each kernel's operands carry their own (scale, zero point); returns the kernels'
    biases (stored int32 in the file)."""
    biases = []
    for node in g.nodes:
        key = op_key(node)
        for data_idx, s_idx, z_idx in QLINEAR_OPERANDS.get(key, ()):
            name = node.output[0] if data_idx == -1 else node.input[data_idx]
            if not name:
                continue
            if data_idx != -1 and g.is_constant(name):
                role, storage = "weight", "quantized_initializer"
            else:
                role, storage = "activation", "runtime"
            tensors.setdefault(name, _tensor(name, role, g, node, s_idx, z_idx, storage, [key]))
        if key == "com.microsoft.QLinearConcat":  # Y_scale, Y_zp, then (X, X_scale, X_zp) triples
            tensors.setdefault(node.output[0], _tensor(node.output[0], "activation", g, node, 0, 1, "runtime", [key]))
        bias_idx = QLINEAR_BIAS_INDEX.get(key)
        if bias_idx is not None and len(node.input) > bias_idx and node.input[bias_idx]:
            biases.append(BiasInfo(node=node.name, op_type=key, dtype=g.dtype_of_constant(node.input[bias_idx]) or "int32",
                                   quantized_in_file=True))
    return biases


def _qdq_biases(g: GraphIndex) -> list[BiasInfo]:
    """QDQ format: the bias of each float compute op, dequantized from an integer constant or stored in float."""
    biases = []
    for node in g.nodes:
        idx = _COMPUTE_WITH_BIAS.get(node.op_type)
        if idx is None or len(node.input) <= idx or not node.input[idx]:
            continue
        b = node.input[idx]
        prod = g.producer.get(b)
        if prod is not None and prod.op_type == DEQUANTIZE and g.is_constant(prod.input[0]):
            dtype = g.dtype_of_constant(prod.input[0]) or "int32"
            match = _bias_scale_matches(g, node, prod)
            biases.append(BiasInfo(node=node.name, op_type=node.op_type, dtype=dtype, quantized_in_file=True,
                                   scale_matches_input_times_weight=match))
        else:
            dtype = g.dtype_of_constant(b) or "float32"
            biases.append(BiasInfo(node=node.name, op_type=node.op_type, dtype=dtype, quantized_in_file=False))
    return biases


def _integer_weights(g: GraphIndex) -> set[str]:
    """quantize_dynamic's format: ConvInteger/MatMulInteger read their integer weight as is (its scale is a
    Mul after the kernel's Cast): stored quantized too, with no QuantizedTensor to carry a scale. Their dtypes."""
    found = {g.dtype_of_constant(n.input[1]) for n in g.nodes if n.op_type in _INTEGER_KERNELS
             and is_onnx_domain(n.domain) and len(n.input) > 1 and g.is_constant(n.input[1])}
    found.discard(None)
    return found


def _summary(values: set[str]) -> str:
    return "none" if not values else (next(iter(values)) if len(values) == 1 else "mixed")


def _weight_summary(weights: list[QuantizedTensor], integer_weights: set[str], float_weights: int) -> str:
    storages = {t.storage for t in weights} | ({"quantized_initializer"} if integer_weights else set())
    summary = _summary(storages)
    if float_weights and summary != "none":
        summary = "mixed"  # a ConvTranspose PT2E or QOperator left alone keeps its float32 weight
    return summary


def _file_format(kernels: dict[str, int], ops_quantized: Counter, qdq_nodes: int) -> str:
    if kernels:
        # QOperator files keep Q/DQ at their boundaries; "mixed" means float compute ops in Q/DQ remain.
        return "mixed" if any(k in ops_quantized for k in COMPUTE_OPS) else "qoperator"
    return "qdq" if qdq_nodes else "float"


def _folded_activations(fp32_histogram: dict[str, int] | None, hist: Counter) -> list[FoldedActivation]:
    """The Relu/Clip the fp32 model has and this file lost: a quantized output's range does their clamp."""
    if not fp32_histogram:
        return []
    folded = []
    for act in ACTIVATIONS_ABSORBED_BY_Q_ORDER:
        gone = fp32_histogram.get(act, 0) - hist.get(act, 0)
        if gone > 0:
            folded.append(FoldedActivation(
                op_type=act, count=gone,
                evidence=(f"the fp32 model has {fp32_histogram.get(act, 0)} {act}, this file {hist.get(act, 0)}: "
                          "the following quantized output's range (zero point at the dtype minimum) does its clamp"),
            ))
    return folded


def _bias_scale_matches(g: GraphIndex, node, bias_dq) -> bool | None:
    """int32 bias is only exact when its scale is s_input * s_weight (what QLinearConv assumes)."""
    def dq_scale(tensor):
        p = g.producer.get(tensor)
        return g.init_array(p.input[1]) if p is not None and p.op_type == DEQUANTIZE else None

    s_x, s_w, s_b = dq_scale(node.input[0]), dq_scale(node.input[1]), g.init_array(bias_dq.input[1])
    if s_x is None or s_w is None or s_b is None:
        return None
    try:
        return bool(np.allclose(np.ravel(s_b), np.ravel(s_x * s_w), rtol=1e-5, atol=0))
    except ValueError:
        return None


# Ops whose operand 1 is a weight: stored in float, it reaches no int8 kernel whatever Q/DQ the
# activations have (a ConvTranspose PT2E or QOperator left alone).
# Keyed by op_key: an upload ORT already optimized holds com.microsoft.FusedConv (Conv + activation,
# weight in slot 1), which ORT's quantizer leaves float between its neighbours' Q/DQ (MarbleNet's VAD).
_WEIGHT_SLOT = {"Conv": 1, "ConvTranspose": 1, "MatMul": 1, "Gemm": 1, "com.microsoft.FusedConv": 1}
# A float op between another op and its QuantizeLinear belongs to that op's unit only when the
# quantizer absorbs it (ORT's ReluQuantFusion / ClipQuantFusion, PT2E's conv-relu patterns).
_UNIT_TAIL = ACTIVATIONS_ABSORBED_BY_Q
# What torch.onnx.export puts between a weight's DequantizeLinear and its reader (nn.Linear on a 3-D
# input: DQ(w) -> Transpose -> MatMul): ORT's transpose optimizer moves it into the constant at level
# basic, so the reader reads a dequantized weight all the same.
_WEIGHT_LAYOUT = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


_INTEGER_KERNELS = ("ConvInteger", "MatMulInteger")  # quantize_dynamic's kernels: x, w, x_zp, w_zp


class _Units:
    """How the nodes of one file sit in quantized units: the questions _classify_ops asks of each node
    (its inputs dequantized, its output quantized, its weight float, a QOperator file's bridge), each
    answered once per tensor or node."""

    def __init__(self, g: GraphIndex, nodes):
        self.g = g
        self.qoperator = any(op_key(n) in QUANTIZED_KERNELS for n in nodes)
        self.derived: dict[str, bool] = {}
        self.memo_in: dict[int, bool] = {}
        self.memo_out: dict[int, bool] = {}

    def dequantized_weight(self, tensor: str, depth: int = 0) -> bool:
        """DequantizeLinear of a constant, possibly through _WEIGHT_LAYOUT ops on nothing else."""
        if tensor not in self.derived:
            p = self.g.producer.get(tensor)
            if p is None or depth > 8:
                self.derived[tensor] = False
            elif p.op_type == DEQUANTIZE:
                self.derived[tensor] = self.g.is_constant(p.input[0])
            else:
                ins = [i for i in p.input if i and not self.g.is_constant(i)]
                self.derived[tensor] = (p.op_type in _WEIGHT_LAYOUT and bool(ins)
                                        and all(self.dequantized_weight(i, depth + 1) for i in ins))
        return self.derived[tensor]

    def data_inputs(self, node):
        return [i for i in node.input if i and not self.g.is_constant(i) and not self.dequantized_weight(i)]

    def bias_add(self, node) -> bool:
        """An Add of a constant to a MatMul's only output: ORT's MatMulAddFusion (level basic) makes the
        two one Gemm, whose QDQ unit ends at the QuantizeLinear after the Add (torch.onnx.export writes
        nn.Linear on a 3-D input as MatMul + Add)."""
        ins = [i for i in node.input if i]
        if node.op_type != "Add" or not is_onnx_domain(node.domain) or len(ins) != 2:
            return False
        live = [i for i in ins if not self.g.is_constant(i) and not self.dequantized_weight(i)]
        p = self.g.producer.get(live[0]) if len(live) == 1 else None
        return p is not None and p.op_type == "MatMul" and len(self.g.consumers.get(live[0], [])) == 1

    def weight(self, node) -> str:
        k = _WEIGHT_SLOT.get(op_key(node))
        return node.input[k] if k is not None and len(node.input) > k else ""

    def float_weight(self, node) -> bool:
        w = self.weight(node)
        return bool(w) and self.g.is_constant(w) and is_float(self.g.dtype_of_constant(w))

    def bridged(self, node) -> bool:
        """In a QOperator file, Q/DQ around an op are a bridge unless it reads a dequantized integer
        weight: a QDQ unit in a file that mixes both formats ("mixed")."""
        if not self.qoperator:
            return False
        p = self.g.producer.get(self.weight(node))
        return not (p is not None and p.op_type == DEQUANTIZE and self.g.is_constant(p.input[0]))


    def fed_by_dq(self, node) -> bool:
        if id(node) in self.memo_in:
            return self.memo_in[id(node)]
        ins = [i for i in node.input if i and not self.g.is_constant(i)]
        ok = bool(ins)
        for i in ins:
            p = self.g.producer.get(i)
            if p is None:
                ok = False
            elif p.op_type == DEQUANTIZE or self.dequantized_weight(i):
                continue
            elif ((node.op_type in _UNIT_TAIL or self.bias_add(node)) and p.op_type not in QDQ_OPS
                  and len(self.g.consumers.get(i, [])) == 1 and self.fed_by_dq(p)):
                continue  # the Relu of a Conv -> Relu -> Q unit, the Add of a MatMul -> Add -> Q one
            else:
                ok = False
        self.memo_in[id(node)] = ok
        return ok

    def feeds_q(self, node) -> bool:
        if id(node) in self.memo_out:
            return self.memo_out[id(node)]
        ok = False
        for o in node.output:
            cons = self.g.consumers.get(o, [])
            if cons and all(c.op_type == QUANTIZE for c in cons):
                ok = True
            elif len(cons) == 1 and (cons[0].op_type in _UNIT_TAIL or self.bias_add(cons[0])) and self.feeds_q(cons[0]):
                ok = True
        self.memo_out[id(node)] = ok
        return ok

    def reads_8bit(self, node, depth=0) -> bool:
        """QOperator files: MaxPool, Reshape, Transpose ... read the int8 output of a QuantizeLinear or
        a QLinear kernel directly (no DequantizeLinear): they run on 8-bit data, not in float."""
        first = next((i for i in node.input if i and not self.g.is_constant(i)), None)
        p = self.g.producer.get(first) if first else None
        if p is None:
            return False
        if self.g.dtypes.get(first) not in (None, "int8", "uint8"):
            return False  # ConvInteger's int32 sum, the float32 after its Cast (dynamic quantization)
        if p.op_type == QUANTIZE or op_key(p) in QUANTIZED_KERNELS:
            return True
        return depth < 8 and p.op_type not in QDQ_OPS and self.reads_8bit(p, depth + 1)


def _classify_ops(g: GraphIndex, nodes):
    """An op is quantized when its data inputs come from DequantizeLinear and its output reaches a
    QuantizeLinear, a Relu/Clip between it and that QuantizeLinear counting as part of its unit
    (Conv -> Relu -> Q). An operand-1 weight stored in float keeps it float, and so does Q/DQ around
    a float op in a QOperator file (the quantizer's bridge around what it did not quantize).
    int8 kernels are counted separately."""
    units = _Units(g, nodes)
    quantized, floating, reasons = Counter(), Counter(), {}
    why: dict[str, Counter] = defaultdict(Counter)
    for node in nodes:
        key = op_key(node)
        if node.op_type in QDQ_OPS or node.op_type in _STRUCTURAL or key in QUANTIZED_KERNELS \
                or key == "DynamicQuantizeLinear":  # the quantizer of a dynamic file, as QuantizeLinear is
            continue
        if units.reads_8bit(node):
            quantized[key] += 1  # runs on the 8-bit tensor as is
            continue
        if not units.data_inputs(node) and not any(
            g.producer.get(i) is not None and g.producer[i].op_type == DEQUANTIZE for i in node.input if i):
            continue  # shape arithmetic on constants
        if node.op_type in _WEIGHT_LAYOUT and all(units.dequantized_weight(o) for o in node.output if o):
            continue  # a weight laid out for its reader, not a computation
        if (units.fed_by_dq(node) and units.feeds_q(node) and not units.float_weight(node)
                and not units.bridged(node)):
            quantized[key] += 1
        else:
            floating[key] += 1
            if units.float_weight(node):
                why[key]["its weight is stored in float (no DequantizeLinear on it)"] += 1
            elif units.bridged(node) and units.fed_by_dq(node) and units.feeds_q(node):
                why[key]["QOperator file: the quantizer left it in float between a DequantizeLinear "
                         "and a QuantizeLinear (a quantized op is a QLinear kernel there)"] += 1
            elif units.fed_by_dq(node):
                why[key]["inputs are dequantized but the output is not quantized"] += 1
            elif units.feeds_q(node):
                why[key]["output is quantized but the inputs are float"] += 1
            else:
                why[key]["not quantized by this tool (no Q/DQ around it)"] += 1
    # One reason per op type; where its nodes differ, each reason with its count, the commonest first.
    for key, counted in why.items():
        reasons[key] = (next(iter(counted)) if len(counted) == 1
                        else "; ".join(f"{r} (x{k})" for r, k in counted.most_common()))
    float_weights = sum(1 for node in nodes if units.float_weight(node))
    return quantized, floating, reasons, float_weights
