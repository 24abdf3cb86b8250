"""Which tensor of a quantized file holds the quantized counterpart of an fp32 tensor.

NOTE: this module reads ModelProtos and returns plain dataclasses; it runs nothing. The op sets
and the graph index come from ``service.pipeline.vocabulary``.

Each tool writes a different file from the same fp32 model:

- ``ort_qdq`` / ``ort_qoperator`` keep the fp32 tensor names, but ``quantize_static`` removes a
  Relu/Clip that follows a quantized op and lets the QuantizeLinear's clamp do its work
  (``QDQRemovableActivation.quantize`` -> ``try_replacing_upstream_output`` in QDQ format, the
  Conv's raw output is then *named* like the Relu's output; ``QLinearActivation.QuantizeClipRelu``
  in QOperator format, the QLinearConv writes the Relu'd value). QOperator tensors are integer
  (``T_quantized``) and are dequantized with the scale/zero point the file gives them.
- ``pt2e_qdq`` is a fresh ``torch.onnx.export`` of the converted module: the names are torch's
  FX names, not the fp32 file's, and BatchNormalization may be folded into the Conv.

So the match is made on structure first: fp32 node N matches file node S when both compute the
same op (QLinearConv counts as Conv) on inputs already matched (Q/DQ pairs are looked through,
weights are wildcards). Ties (two Convs on one input) are broken by torch's module scope
(``pkg.torch.onnx.name_scopes`` metadata, kept by both exports and by the ONNX->torch converter),
then the node name, then the order in the file. Names are used only where the tool keeps the
fp32 names (``names_shared``), as a fallback when the structure differs (e.g. a fused op).
An fp32 op the file does not have (a removed Relu, a folded BatchNormalization, the Add of a constant
that pre-processing folded into the Conv/Gemm before it as its bias) is "absorbed":
its output matches the producer's value in the file, and the producer's own fp32 output is then
either compared with the raw float value the file still computes (a removed Relu in QDQ format)
or left out with the reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import numpy as np

from service.pipeline.vocabulary import (
    ACTIVATIONS_ABSORBED_BY_Q,
    BIASED_COMPUTE_OPS,
    COMMUTATIVE_OPS,
    CONVERTER_METADATA_PREFIX,
    DEQUANTIZE,
    MS,
    OUTPUT_ZERO_POINT_INDEX,
    QDQ_OPS,
    QLINEAR_OPERANDS,
    QUANTIZE,
    graph_from_model,
    op_key,
)

ONNX_NODE_KEY = CONVERTER_METADATA_PREFIX + "onnx_node"

# fp32 ops a quantizer may drop into a neighbour: activations into the QuantizeLinear clamp,
# BatchNormalization into the Conv's weights, no-ops removed by pre-processing.
_ABSORBABLE = ACTIVATIONS_ABSORBED_BY_Q | {"BatchNormalization", "Identity", "Dropout"}
_NAME_SCOPES = "pkg.torch.onnx.name_scopes"
# Ops whose following Add of a constant ORT's ConvAddFusion / MatMulAddFusion (quant_pre_process, level
# basic) folds in as their bias: the file's output of the op is then the value after the Add.
_TAKES_A_BIAS = BIASED_COMPUTE_OPS | {"MatMul"}


def _bias_add(n, ref: "GraphView") -> bool:
    """An Add of a constant to the output of a _TAKES_A_BIAS op (PaddlePaddle exports write the bias so)."""
    if n.op_type != "Add" or (n.domain or "") not in ("", "ai.onnx"):
        return False
    live = [i for i in n.input if i and i not in ref.const]
    if len(live) != 1 or len([i for i in n.input if i]) != 2:
        return False
    p = ref.producer.get(live[0])
    return p is not None and p.op_type in _TAKES_A_BIAS


@dataclass(frozen=True)
class Located:
    """Where the quantized counterpart of one fp32 tensor is, and how to read it.

    ``tensor``: the file's tensor to expose as an output. ``scale``/``zero_point``: set when
    ``tensor`` is integer (dequantize it) or when it is the DequantizeLinear output of the
    QuantizeLinear that quantized this value (then they describe the step, for LSB and clipping).
    ``how``: how it was aligned, in words a reader can check in Netron.
    """

    tensor: str
    how: str
    integer: bool = False
    scale: float | None = None
    zero_point: int | None = None
    qmin: int | None = None
    qmax: int | None = None


@dataclass
class Alignment:
    located: dict[str, Located] = field(default_factory=dict)  # fp32 tensor -> where in the file
    left_out: dict[str, str] = field(default_factory=dict)  # fp32 tensor -> why it is not compared


class GraphView:
    """The float-op view of one main graph (subgraph tensors cannot be exposed as outputs) on top
    of the shared ``vocabulary.GraphView``: constants (initializers, Constant nodes and what only
    they feed), the float op a QOperator kernel computes, values seen through Q/DQ pairs."""

    def __init__(self, model):
        self.index = graph_from_model(model)
        g = model.graph
        self.nodes = self.index.nodes
        self.producer, self.consumers = self.index.producer, self.index.consumers
        self.inputs = [i.name for i in g.input if i.name not in self.index.initializers]
        self.const: set[str] = set(self.index.initializers)
        for n in self.nodes:  # graph order is topological
            if n.input and all((not i) or i in self.const for i in n.input):
                self.const.update(o for o in n.output if o)

    def is_compute(self, n) -> bool:
        return n.op_type not in QDQ_OPS and n.op_type != "Constant" and not all(o in self.const for o in n.output if o)

    def float_op(self, n) -> str:
        """QLinearConv / com.microsoft.QLinearAdd / QGemm compute Conv / Add / Gemm."""
        if op_key(n) in OUTPUT_ZERO_POINT_INDEX:
            return n.op_type[len("QLinear"):] if n.op_type.startswith("QLinear") else n.op_type[1:]
        return n.op_type

    def activation_inputs(self, n) -> list[str]:
        key = op_key(n)
        if key in QLINEAR_OPERANDS:
            names = [n.input[d] for d, _, _ in QLINEAR_OPERANDS[key][:-1] if d < len(n.input) and n.input[d]]
        elif key == f"{MS}.QLinearConcat":
            names = [n.input[k] for k in range(2, len(n.input), 3)]
        else:
            names = [i for i in n.input if i]
        return [self.canonical(i) for i in names if i not in self.const]

    def canonical(self, name: str) -> str:
        """The value a tensor carries, looking through QuantizeLinear/DequantizeLinear pairs."""
        for _ in range(8):
            n = self.producer.get(name)
            if n is None or n.op_type not in QDQ_OPS or name in self.const:
                return name
            name = n.input[0]
        return name

    def compute_consumers(self, name: str) -> list:
        """The compute nodes reading ``name``, through Q/DQ pairs."""
        out, stack, seen = [], [name], {name}
        while stack:
            for c in self.consumers.get(stack.pop(), []):
                if c.op_type in QDQ_OPS:
                    fresh = [o for o in c.output if o and o not in seen]
                    seen.update(fresh)
                    stack.extend(fresh)
                elif all(c is not x for x in out):
                    out.append(c)
        return out

    def scope(self, n) -> str:
        return next((p.value for p in n.metadata_props if p.key == _NAME_SCOPES), "")

    def scope_names(self, n) -> list[str]:
        """``pkg.torch.onnx.name_scopes`` as a list (``['', 'conv_a', 'conv2d_1']``), else []."""
        raw = self.scope(n)
        try:
            value = ast.literal_eval(raw) if raw else []
        except (ValueError, SyntaxError):
            return []
        return [str(v) for v in value if v] if isinstance(value, list) else []

    def is_integer(self, name: str) -> bool:
        dtype = self.index.dtypes.get(name)
        return dtype is not None and dtype.startswith(("int", "uint"))

    def step_of_integer(self, name: str) -> tuple[float, int, int, int] | None:
        """(scale, zero_point, qmin, qmax) of an integer activation, from the op that wrote it
        (MaxPool / Transpose / Reshape on int8 keep their input's step), else from the
        DequantizeLinear or QOperator kernel that reads it (a QOperator Gather of a quantized
        embedding table: the table is an initializer, so no QuantizeLinear wrote the values, and the
        next QLinearMatMul states their scale as its input's)."""
        return self._step_from_producers(name) or self._step_from_readers(name)

    def _step_from_producers(self, name: str):
        n = self.producer.get(name)
        for _ in range(64):
            if n is None:
                return None
            key = op_key(n)
            if key == QUANTIZE:
                return self._step(n.input[1], n.input[2] if len(n.input) > 2 else None)
            if key in OUTPUT_ZERO_POINT_INDEX:
                z = OUTPUT_ZERO_POINT_INDEX[key]
                return self._step(n.input[z - 1], n.input[z] if z < len(n.input) else None)
            # Gather moves values of its data input (0); its indices are ids, not the values' step.
            ins = [i for i in (n.input[:1] if n.op_type == "Gather" else n.input) if i and i not in self.const]
            if not ins:
                return None
            n = self.producer.get(ins[0])
        return None

    def _step_from_readers(self, name: str):
        for d in self.consumers.get(name, []):
            triples = [(0, 1, 2)] if d.op_type == DEQUANTIZE else list(QLINEAR_OPERANDS.get(op_key(d), ())[:-1])
            for data, scale, zp in triples:
                if len(d.input) > scale and d.input[data] == name:
                    step = self._step(d.input[scale], d.input[zp] if len(d.input) > zp else None)
                    if step is not None:
                        return step
        return None

    def quantized_view(self, name: str) -> tuple[str, bool, tuple] | None:
        """The tensor consumers read after ``name`` is quantized: (tensor, integer?, step)."""
        for c in self.consumers.get(name, []):
            if c.op_type != QUANTIZE:
                continue
            step = self._step(c.input[1], c.input[2] if len(c.input) > 2 else None)
            if step is None:
                continue
            for d in self.consumers.get(c.output[0], []):
                if d.op_type == DEQUANTIZE:
                    return d.output[0], False, step
            return c.output[0], True, step
        return None

    def _step(self, scale_name: str, zp_name: str | None):
        scale = self.index.init_array(scale_name)
        if scale is None or np.size(scale) != 1:
            return None  # per-channel activations: no single step
        zp, lo, hi = 0, -128, 127
        if zp_name:
            z = self.index.init_array(zp_name)
            if z is None or np.size(z) != 1 or z.dtype.kind not in "iu":
                return None
            zp = int(z.ravel()[0])
            lo, hi = int(np.iinfo(z.dtype).min), int(np.iinfo(z.dtype).max)
        else:
            lo, hi = 0, 255  # no zero point: uint8, zero point 0
        return float(np.asarray(scale).ravel()[0]), zp, lo, hi


def aligned_tensors(fp32_model, model, *, names_shared: bool, wanted: list[str] | None = None) -> Alignment:
    """fp32 tensor -> its counterpart in ``model`` (see the module docstring for the rules)."""
    ref, idx = GraphView(fp32_model), GraphView(model)
    result = Alignment()
    mapped: dict[str, str] = {}  # fp32 tensor -> canonical value in the file
    how: dict[str, str] = {}
    raw_only: dict[str, str] = {}  # fp32 tensor -> why only the float value before the clamp compares
    hidden: dict[str, str] = {}  # fp32 tensor -> why nothing in the file equals it (kept mapped for what follows)
    for pos, name in enumerate(ref.inputs):
        if name in idx.inputs:
            mapped[name], how[name] = name, "graph input, by name"
        elif pos < len(idx.inputs):
            mapped[name], how[name] = idx.inputs[pos], "graph input, by position"

    candidates: dict[tuple, list] = {}
    for n in idx.nodes:
        if idx.is_compute(n):
            candidates.setdefault(_key(idx.float_op(n), idx.activation_inputs(n)), []).append(n)
    claimed: set[int] = set()
    scopes = _scope_index(idx)
    file_tensors = {o for n in idx.nodes for o in n.output if o}

    for n in ref.nodes:
        if not ref.is_compute(n):
            continue
        ins = ref.activation_inputs(n)
        outs = [o for o in n.output if o]
        if ins and all(i in mapped for i in ins):
            options = [s for s in candidates.get(_key(n.op_type, [mapped[i] for i in ins]), []) if id(s) not in claimed]
            if options:
                s = _tie_break(n, options, ref, idx)
                claimed.add(id(s))
                for k, o in enumerate(outs):
                    if k < len(s.output) and s.output[k]:
                        mapped[o], how[o] = s.output[k], f"structure: {s.op_type} '{s.name}'"
                        _check_absorbed_consumer(o, s.output[k], ref, idx, raw_only, hidden)
                continue
            if (n.op_type in _ABSORBABLE or _bias_add(n, ref)) and len(ins) == 1 and outs:
                c = mapped[ins[0]]
                mapped[outs[0]] = c
                how[outs[0]] = (f"Add of a constant folded into '{c}' as its bias (ConvAddFusion / MatMulAddFusion)"
                                if _bias_add(n, ref) else
                                f"{n.op_type} absorbed by the file (it clamps through the quantization range of '{c}')"
                                if ins[0] in raw_only else f"{n.op_type} absorbed by the file (none after '{c}')")
                _check_absorbed_consumer(outs[0], c, ref, idx, raw_only, hidden)
                continue
        s = _by_module_scope(n, idx, scopes, claimed)
        if s is not None:  # the structure differs, but the converter kept the ONNX node's name
            claimed.add(id(s))
            if outs:
                mapped[outs[0]] = idx.canonical(s.output[0])
                how[outs[0]] = (f"the module the ONNX->torch conversion named after fp32 node '{n.name}': "
                                f"its last op, {s.op_type} '{s.name}'")
                _check_absorbed_consumer(outs[0], mapped[outs[0]], ref, idx, raw_only, hidden)
            continue
        if names_shared:  # the structure differs (a fused or rewritten op): fall back on the name
            for o in outs:
                if o in file_tensors:
                    mapped[o], how[o] = idx.canonical(o), "by name (the structure differs here)"
                elif f"{o}_quantized" in file_tensors:
                    mapped[o], how[o] = f"{o}_quantized", "by name (QOperator '_quantized' tensor)"
                else:
                    continue
                # a QGemm fused from MatMul + Add writes its output at the Relu's range, as a match by structure does
                _check_absorbed_consumer(o, mapped[o], ref, idx, raw_only, hidden)

    for o in _float_tensors(ref, wanted):
        if o not in mapped:
            result.left_out[o] = "no counterpart in this file (its producer has no match by structure" + (
                " or name)" if names_shared else ")")
            continue
        c = mapped[o]
        if o in hidden:
            result.left_out[o] = hidden[o]
            continue
        if o in raw_only:
            if idx.is_integer(c):
                result.left_out[o] = raw_only[o] + "; the file only holds the value after it, as integers"
            else:
                result.located[o] = Located(tensor=c, how=how[o] + "; " + raw_only[o] + ": compared the float value "
                                            "the file computes before its QuantizeLinear")
            continue
        located = _read(c, how[o], idx)
        if located is None and ref.is_integer(o):  # ids in both files: the same integers, compared as is
            result.located[o] = Located(tensor=c, how=how[o] + "; integer in both files, compared as is", integer=True)
        elif located is None:  # integers compared with floats would read as a -30 dB tensor
            result.left_out[o] = (how[o] + f"; '{c}' is an integer tensor whose step the file states nowhere "
                                  "(per channel, or no QuantizeLinear writes it and no DequantizeLinear reads it)")
        else:
            result.located[o] = located
    return result


def _read(c: str, how: str, idx: GraphView) -> Located | None:
    """How to read the file's ``c`` as a float; None for an integer tensor with no single step."""
    if idx.is_integer(c):
        step = idx.step_of_integer(c)
        if step is None:
            return None
        return Located(c, how + "; integer tensor, dequantized", True, *step)
    view = idx.quantized_view(c)
    if view is None:
        return Located(tensor=c, how=how + "; float in the file (not quantized here)")
    tensor, integer, step = view
    return Located(tensor, how + f"; read after its QuantizeLinear ({tensor})", integer, *step)


def _check_absorbed_consumer(o: str, c: str, ref: GraphView, idx: GraphView, raw_only: dict, hidden: dict) -> None:
    """fp32 ``o`` feeds an op the file absorbed: the file's value ``c`` is then that op's output,
    not ``o``. A clamped activation leaves the pre-clamp float in QDQ files (compare it raw);
    a folded BatchNormalization leaves nothing that equals ``o``."""
    readers = _readers_past_noops(o, ref)
    fp32_next = [x for x in readers if x.op_type in _ABSORBABLE or _bias_add(x, ref)]
    if not fp32_next:
        return
    file_ops = {idx.float_op(x) for x in idx.compute_consumers(c)}
    for a in fp32_next:
        if a.op_type in file_ops:
            continue
        if a.op_type in ACTIVATIONS_ABSORBED_BY_Q and len(readers) == 1:
            raw_only[o] = f"the file dropped the {a.op_type} after it into a QuantizeLinear"
        else:
            hidden[o] = (f"the file folded the {a.op_type} after it into this op: its '{c}' is the value after "
                         f"the {a.op_type}, nothing in the file equals the value before")
        return


def _readers_past_noops(o: str, ref: GraphView, depth: int = 0) -> list:
    """fp32 readers of ``o``, an Identity/Dropout replaced by its own readers (Paddle writes
    Conv -> Add -> Identity -> Relu)."""
    out = []
    for x in ref.consumers.get(o, []):
        if x.op_type in ("Identity", "Dropout") and x.output and depth < 4:
            out += _readers_past_noops(x.output[0], ref, depth + 1)
        else:
            out.append(x)
    return out


def _tie_break(n, options: list, ref: GraphView, idx: GraphView):
    if len(options) == 1:
        return options[0]
    scope = ref.scope(n)
    if scope:
        same = [s for s in options if idx.scope(s) == scope]
        if same:
            return same[0]
    for s in options:
        if s.name and s.name in (n.name, f"{n.name}_quant"):
            return s
    return options[0]


def _norm(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z@]+", "_", name).strip("_")


def _scope_index(idx: GraphView) -> dict[str, list]:
    """Normalized module name -> the file's compute nodes under it, in file order. An ONNX upload
    reaches PT2E through the ONNX->torch converter, which names each module after its ONNX node
    (onnx2torch: ``inner.Conv@0`` for node ``Conv@0``); torch.onnx.export writes those module
    names into ``pkg.torch.onnx.name_scopes``."""
    out: dict[str, list] = {}
    for n in idx.nodes:
        if not idx.is_compute(n):
            continue
        # The project's converter stamps the upload's node name on every file node it made
        # (quantize/onnx_torch/names.py): the surest key where it is there.
        stamped = next((p.value for p in getattr(n, "metadata_props", ()) if p.key == ONNX_NODE_KEY), None)
        if stamped and _norm(stamped):
            out.setdefault(_norm(stamped), []).append(n)
            continue
        for module in idx.scope_names(n)[:-1]:  # the last scope is the op's own FX name
            for key in {_norm(module), _norm(module.rsplit(".", 1)[-1])}:
                if key:
                    out.setdefault(key, []).append(n)
    return out


def _by_module_scope(n, idx: GraphView, scopes: dict[str, list], claimed: set[int]):
    """The last unclaimed file op in the module named after fp32 node ``n`` (its output is the module's)."""
    if not n.name:
        return None
    nodes = [s for s in scopes.get(_norm(n.name), []) if id(s) not in claimed]
    return nodes[-1] if nodes else None


def _key(op: str, inputs: list[str]) -> tuple:
    return (op, tuple(sorted(inputs)) if op in COMMUTATIVE_OPS else tuple(inputs))


def _float_tensors(ref: GraphView, wanted: list[str] | None) -> list[str]:
    if wanted is not None:
        return list(wanted)
    outs = list(ref.inputs)
    for n in ref.nodes:
        if ref.is_compute(n):
            outs.extend(o for o in n.output if o)
    return outs
