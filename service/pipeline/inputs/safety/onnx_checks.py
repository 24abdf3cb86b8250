"""Parse an uploaded ONNX model with external data off, then check it statically.

Nothing here runs the model, shape inference, onnxruntime or quantize_static: every check walks
the protobuf with plain Python so that the amplification files measured on this stack
(ConstantOfShape of 132 bytes -> 1 GB, a 111-byte sparse initializer -> 1 GB per session,
a 100k-node chain, 64 initializers sharing one 20 MB external range) are refused before a
heavy call sees them.

External data is never read from bytes: onnxruntime and ``onnx.numpy_helper`` resolve a relative
``location`` against the process's current directory when given a model as bytes, and onnxruntime
follows a hard link out of the model folder when given a path. So every ``location`` must be a
plain file name, listed among the files actually uploaded, a regular file with one link that
really sits in the model's folder; data is then loaded by path from that folder only
(:func:`load_external_data_from_job_folder`).
"""

from __future__ import annotations

import math
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from service.errors import InvalidModel, UnsupportedModel
from service.pipeline.inputs.node_order import sort_nodes, topological_order
from service.pipeline.inputs.output_shapes import outputs_given_inferred_shapes, shapeless_outputs
from service.pipeline.vocabulary import RANDOM_LIKE_OPS, all_nodes, is_onnx_domain, node_reads, onnx_domain_name

from .budgets import DEFAULT_BUDGETS, Budgets

if TYPE_CHECKING:
    import onnx

# ai.onnx opsets onnxruntime 1.32 guarantees (7+) up to what onnx 1.23.2 defines (28).
MIN_AI_ONNX_OPSET = 7
MIN_IR_VERSION = 3
# The newest version of each domain onnxruntime 1.32 loads a model importing (model_load_utils.h
# ValidateOpsetForDomain against its registry's last released versions: ONNX's domains and the ones
# contrib_defs.cc registers). Past it ORT refuses the file even when no node uses the domain;
# a domain not listed (a framework's own, 'pkg.paddle2onnx') is not checked. Pinned by
# tests/safety/test_safety_onnx.py against the installed ORT. ai.onnx is bounded by onnx's own range.
ORT_NEWEST_OPSETS = {
    "ai.onnx.ml": 5, "ai.onnx.training": 1, "ai.onnx.preview.training": 1, "ai.onnx.preview": 1,
    "com.microsoft": 1, "com.microsoft.experimental": 1, "com.microsoft.nchwc": 1, "org.pytorch.aten": 1,
    "com.ms.internal.nhwc": 28,
}
# Domains the toolchain can run. Model-local function domains are added per model.
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc"})
# Domains whose ops onnx knows the schemas of (so an unknown op is refused here, not deep in ORT).
_SCHEMA_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})

# Ops whose output size is set by the *values* of their inputs or attributes, not their sizes.
_AMPLIFIERS = frozenset(
    {"ConstantOfShape", "Expand", "Tile", "Range", "RandomNormal", "RandomUniform", "EyeLike", "Resize", "Upsample",
     "Pad", "OneHot"}
)
# Ops our tiny evaluator folds for shape-like tensors (what exporters put in front of Reshape/Expand).
_FOLDABLE = frozenset(
    {"Identity", "Cast", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Mul", "Add", "Sub", "Div", "Max", "Min",
     "Abs", "Neg", "Gather", "Shape", "Size", "Slice", "ReduceProd", "ReduceSum", "Flatten"}
)
_FOLD_MAX_ELEMENTS = 4096

_UPLOAD_HINT = "Re-export the model with a current exporter (torch.onnx.export(..., dynamo=True) or onnx.save) and upload it again."


# ---------------------------------------------------------------------------------------------
# public entry points


def onnx_model_from_path(
    path: Path,
    *,
    budgets: Budgets | None = None,
    allowed_data_files: set[str] | None = None,
    structural_check: bool = True,
) -> "onnx.ModelProto":
    """Parse ``path`` with external data OFF and check it; return the ModelProto (data not loaded).

    ``allowed_data_files``: the plain file names uploaded next to the model (from
    :func:`safe_extract_archive`); ``None`` means none, so any external reference is refused.
    Raises InvalidModel (not a well-formed model), UnsupportedModel (valid, but not something the
    toolchain can take) or BudgetExceeded (too large for the configured budgets).
    """
    import onnx

    budgets = budgets or DEFAULT_BUDGETS
    path = Path(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # DecodeError, RecursionError, OSError
        raise InvalidModel(
            "The upload could not be parsed as an ONNX model (corrupt, truncated or nested too deeply).",
            hint=_UPLOAD_HINT,
        ) from e
    check_onnx_model(model, model_dir=path.parent, budgets=budgets, allowed_data_files=allowed_data_files,
                     structural_check=structural_check, _model_path=path)
    return model


def check_onnx_model(
    model: "onnx.ModelProto",
    *,
    model_dir: Path | None,
    budgets: Budgets | None = None,
    allowed_data_files: set[str] | None = None,
    structural_check: bool = True,
    _model_path: Path | None = None,
) -> "ModelStats":
    """Every static check on an already parsed ModelProto (external data not loaded).

    ``structural_check=False`` skips onnx's C++ checker: the API process pre-validates with the
    pure-Python checks only and leaves native code on hostile bytes to the workers.
    """
    budgets = budgets or DEFAULT_BUDGETS
    _check_header(model)
    _refuse_text_not_utf8(model)
    domains = _check_opsets(model)
    walker = _Walker(model, budgets=budgets, model_dir=model_dir, allowed_data_files=allowed_data_files or set(),
                     domains=domains)
    walker.run()
    _refuse_classic_ml_only(walker.stats.op_types)
    _check_graph_io(model, budgets)
    if structural_check:
        _run_onnx_checker(model, _model_path, has_external=walker.stats.external_bytes > 0)
    return walker.stats


def load_external_data_from_job_folder(model: "onnx.ModelProto", model_dir: Path,
                                       allowed_data_files: set[str] | None = None) -> None:
    """Load a checked model's external data in place, by path, from ``model_dir`` only.

    Re-checks every location first (the folder could have changed since the check).
    """
    from onnx.external_data_helper import load_external_data_for_model

    for tensor, _where in _iter_model_tensors(model):
        if _is_external(tensor):
            _check_external_location(tensor, Path(model_dir), allowed_data_files or set(), where=_where)
    try:
        load_external_data_for_model(model, str(model_dir))
    except Exception as e:
        raise InvalidModel("The model's external data files could not be read.", hint=_UPLOAD_HINT) from e


def check_input_elements(name: str, shape: tuple[int, ...] | list[int], budgets: Budgets | None = None) -> None:
    """Refuse a resolved input shape (dynamic dims filled in) larger than ``max_input_elements``."""
    budgets = budgets or DEFAULT_BUDGETS
    if any((not isinstance(d, int)) or d < 0 for d in shape):
        raise InvalidModel(f"Input '{safe_name(name)}' has an invalid shape {list(shape)}.")
    n = math.prod(shape)
    if n > budgets.max_input_elements:
        refused = budgets.refuse("max_input_elements", f"input '{safe_name(name)}' with shape {list(shape)}", n)
        refused.hint = ("Give its dynamic dims smaller values (options.input_shapes, or the shapes of the uploaded .npz), "
                        "use a smaller model, or ask the operator to raise the budget 'max_input_elements'.")
        raise refused


# ---------------------------------------------------------------------------------------------
# header, opsets, graph inputs


def _check_header(model) -> None:
    import onnx

    if model.ir_version <= 0 and not model.HasField("graph") and not model.opset_import:
        # what an empty (0-byte) .onnx parses to: the archive path reads it without the upload sniffer, and
        # "IR version 0 is outside 3..14" sent the user to re-save a file that holds nothing
        raise InvalidModel("The .onnx file is empty or not an ONNX model: it holds no ir_version, opset_import or graph.",
                           hint="Check that the model was fully written before it was archived, then upload it again.")
    if model.ir_version < MIN_IR_VERSION or model.ir_version > onnx.IR_VERSION:
        raise UnsupportedModel(
            f"The model's IR version {model.ir_version} is outside what this toolchain reads "
            f"({MIN_IR_VERSION}..{onnx.IR_VERSION}).",
            hint="Re-save the model with onnx.save from onnx 1.23 (or convert it with onnx.version_converter).",
        )
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise InvalidModel("The model's graph has no nodes.", hint="Upload a model that computes something.")
    if len(model.training_info):
        raise UnsupportedModel("Models with training_info (ONNX training graphs) are not supported.",
                               hint="Export an inference-only model.")


def _refuse_text_not_utf8(model) -> None:
    """ONNX's strings are UTF-8, but protobuf's proto2 parser takes any bytes (onnx's checker and ORT
    load such a file); python's protobuf then hands the field over as ``bytes``, and every name in
    the report, the page and the JSON would be the repr of a byte string, or a crash minutes into
    the job. The first such field is named with its path in the ModelProto."""
    found = _first_bytes_in_string_field(model, "model")
    if found is not None:
        where, value = found
        raise InvalidModel(
            f"The model holds text that is not valid UTF-8 at {where}: {safe_name(repr(value[:60]))}. ONNX requires "
            "UTF-8 strings; no name in the report could be written for it.",
            hint="Re-save the model with the field decoded (onnx.load, then e.g. node.name = "
                 "node.name.decode('utf-8', 'replace'), then onnx.save) and upload again.")


def _first_bytes_in_string_field(msg, path: str) -> tuple[str, bytes] | None:
    from google.protobuf.descriptor import FieldDescriptor

    for fd, value in msg.ListFields():
        if fd.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue  # raw_data, string_data, float_data: data, not text
        for i, v in enumerate(value) if fd.is_repeated else ((None, value),):
            at = f"{path}.{fd.name}" + (f"[{i}]" if i is not None else "")
            if fd.type == FieldDescriptor.TYPE_STRING:
                if isinstance(v, bytes):
                    return at, v
            else:
                found = _first_bytes_in_string_field(v, at)
                if found is not None:
                    return found
    return None


def _check_opsets(model) -> set[str]:
    import onnx

    domains: set[str] = set()
    seen: dict[str, int] = {}
    for imp in model.opset_import:
        dom = imp.domain
        if dom in seen:
            # The same import twice is what skl2onnx 1.19 and onnx.compose.merge_models write; onnx's
            # checker and ORT take it. Two versions of one domain name no opset to run.
            if seen[dom] == imp.version:
                continue
            raise InvalidModel(f"The opset_import lists domain '{safe_name(dom)}' twice, as versions {seen[dom]} "
                               f"and {imp.version}.",
                               hint="Keep one opset_import entry per domain, at the version the nodes were "
                                    "written for, and save the model again.")
        seen[dom] = imp.version
        if is_onnx_domain(dom):
            hi = onnx.defs.onnx_opset_version()
            if not (MIN_AI_ONNX_OPSET <= imp.version <= hi):
                raise UnsupportedModel(
                    f"The model imports ai.onnx opset {imp.version}; this toolchain takes {MIN_AI_ONNX_OPSET}..{hi} "
                    f"(ONNX Runtime runs opset {MIN_AI_ONNX_OPSET} and newer: older ops such as Gemm-6 have no kernel).",
                    hint="Convert the model with onnx.version_converter.convert_version(model, 17) and upload it again.",
                    opset=imp.version,
                )
        elif imp.version > ORT_NEWEST_OPSETS.get(dom, imp.version):
            raise UnsupportedModel(
                f"The model imports domain '{dom}' at version {imp.version}; ONNX Runtime loads no model that "
                f"imports it past version {ORT_NEWEST_OPSETS[dom]}, even when no node uses it.",
                hint=f"If no node uses '{dom}', delete its opset_import entry; otherwise re-export the model for "
                     f"'{dom}' version {ORT_NEWEST_OPSETS[dom]} or lower. Then upload it again.",
                opset=imp.version,
            )
        domains.add(dom)
    if not any(is_onnx_domain(d) for d in domains):
        if domains == {"ai.onnx.ml"}:  # onnxmltools / skl2onnx of a classic estimator: ORT runs it
            raise _classic_ml_only("imports only the ai.onnx.ml domain")
        raise UnsupportedModel("The model does not import the default ONNX domain (ai.onnx).", hint=_UPLOAD_HINT)
    # A domain only imported is harmless: real files import ai.onnx.training, com.microsoft.experimental
    # or their framework's own domain without a node in it, and ORT runs them. Only a domain a node
    # (graph, subgraph or function body) uses must be one the toolchain runs: _Walker._check_op.
    function_domains = {f.domain for f in model.functions}
    return (domains & KNOWN_DOMAINS) | function_domains


def _classic_ml_only(what: str) -> UnsupportedModel:
    return UnsupportedModel(
        f"The model {what} (a scikit-learn or similar export: trees, linear models, scalers): it has no "
        "ai.onnx op, so there is no Conv, MatMul or Gemm for int8 to quantize.",
        hint="Quantization pays off for neural networks; a model like this runs in float as it is. If it "
             "does use ai.onnx ops, add the missing opset_import entry ('' at its version) and upload it again.")


def _refuse_classic_ml_only(op_types: set[str]) -> None:
    """The same refusal when the default domain is imported but no node uses it (skl2onnx imports
    both): each quantizer would write the float model again, and every SQNR would read 'exact'."""
    if op_types and all(op.startswith("ai.onnx.ml.") for op in op_types):
        raise _classic_ml_only(f"uses only ai.onnx.ml operators ({', '.join(sorted(o[len('ai.onnx.ml.'):] for o in op_types)[:6])})")


def _check_graph_io(model, budgets: Budgets) -> None:
    g = model.graph
    init_names = {t.name for t in g.initializer} | {s.values.name for s in g.sparse_initializer}
    real_inputs = [i for i in g.input if i.name not in init_names]
    if not real_inputs and g.input:  # each has a default: ORT and the quantizers take them as constants
        shadowed = ", ".join(repr(i.name) for i in g.input[:5])
        raise UnsupportedModel(
            f"Graph input {shadowed} has an initializer of the same name (a default value), so the model is a "
            "constant: there is nothing to calibrate or compare." if len(g.input) == 1 else
            f"Every graph input ({shadowed}{', ...' if len(g.input) > 5 else ''}) has an initializer of the same name "
            "(a default value), so the model is a constant: there is nothing to calibrate or compare.",
            hint="Remove the initializers named like the inputs the model really takes (or export with "
                 "keep_initializers_as_inputs=False), then upload it again.")
    if not real_inputs:
        raise UnsupportedModel("The model has no graph inputs, so there is nothing to calibrate or compare.",
                               hint="Export the model with its real inputs as graph inputs.")
    if len(real_inputs) > budgets.max_graph_inputs:
        raise budgets.refuse("max_graph_inputs", "graph inputs", len(real_inputs))
    if not g.output:
        raise InvalidModel("The model's graph has no outputs.", hint=_UPLOAD_HINT)
    if len(g.output) > budgets.max_graph_outputs:
        raise budgets.refuse("max_graph_outputs", "graph outputs", len(g.output))
    _refuse_outputs_without_numpy_form(g)
    _refuse_outputs_independent_of_inputs(g, real_inputs)
    for vi in real_inputs:
        if vi.type.WhichOneof("value") != "tensor_type":
            read = any(vi.name in n.input for n in all_nodes(g))
            raise UnsupportedModel(
                f"Input '{safe_name(vi.name)}' is not a tensor (sequence/map/optional inputs are not supported)"
                + ("." if read else "; no node reads it."),
                hint=("Wrap the model so that every graph input is a tensor (an optional input: export it present, "
                      "as a tensor), then upload it again." if read else
                      "Remove the unused input from graph.input (onnx: del model.graph.input[i]) and upload it again."))
        dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else []
        # Some exporters (Paddle) write -1 for a dynamic dim: it is dynamic, not an error, and
        # input_shapes gives it a value like any symbolic dim.
        if any(d.WhichOneof("value") == "dim_value" and d.dim_value == 0 for d in dims):
            # it was fed size 1 as if dynamic, and every path failed on ORT's shape check
            raise UnsupportedModel(f"Input '{safe_name(vi.name)}' has a dimension of size 0: an empty tensor has no "
                                   "values to calibrate or compare.",
                                   hint="Export the model with that dimension dynamic (a dim_param) or at its real size.")
        static = [d.dim_value for d in dims if d.WhichOneof("value") == "dim_value" and d.dim_value > 0]
        n = math.prod(static) if static else 0
        if n > budgets.max_input_elements:
            raise budgets.refuse("max_input_elements", f"input '{safe_name(vi.name)}' declares", n)


# TensorProto element types onnxruntime 1.32's Python API hands back as no numpy array of numbers: bfloat16,
# float8e5m2, int4 and uint4 raise "No corresponding Numpy type for Tensor Type" after the run (so the fp32
# check blamed the model's shapes), float8e4m3fn comes back as its raw bytes in uint8 (compared as integers:
# 'integer_outputs_differ'), complex is not loaded at all ("MLDataType for: tensor(complex64) is not currently
# registered"). Pinned by tests/safety/test_hostile_structure.py.
_NO_NUMPY_OUTPUT = {16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
                    21: "uint4", 22: "int4", 23: "float4e2m1", 14: "complex64", 15: "complex128"}


def _elem_types(t) -> Iterator[int]:
    """The tensor element types a TypeProto holds (inside sequences, optionals and maps too)."""
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        yield t.tensor_type.elem_type
    elif kind == "sequence_type":
        yield from _elem_types(t.sequence_type.elem_type)
    elif kind == "optional_type":
        yield from _elem_types(t.optional_type.elem_type)
    elif kind == "map_type":
        yield from _elem_types(t.map_type.value_type)


def _refuse_outputs_without_numpy_form(g) -> None:
    for vi in g.output:
        bad = next((_NO_NUMPY_OUTPUT[e] for e in _elem_types(vi.type) if e in _NO_NUMPY_OUTPUT), None)
        if bad is not None:
            raise UnsupportedModel(
                f"Output '{safe_name(vi.name)}' is {bad}: onnxruntime's Python API, which runs every file here, returns "
                "no numpy array of that type, so no quantized file's output could be compared with fp32's.",
                hint="end the graph with a Cast of that output to float32 (the ops before it can stay as they are), or "
                     "remove it from graph.output, then upload it again.", output=safe_name(vi.name), dtype=bad)


def _refuse_outputs_independent_of_inputs(g, real_inputs) -> None:
    """Refuse a graph none of whose outputs reads a graph input (through any node, a body's outer reads
    included): every path would write the same constant, each level's SQNR would read 'exact' or 139 dB
    of constant folding's rounding, and the job passed with 'nothing_quantized' naming no op. One
    constant output beside computed ones (a detector's anchors) is taken."""
    readers: dict[str, list] = {}
    for node in g.node:
        for name in node_reads(node):
            readers.setdefault(name, []).append(node)
    reached = {i.name for i in real_inputs}
    stack = list(reached)
    while stack:
        for node in readers.get(stack.pop(), ()):
            for o in node.output:
                if o and o not in reached:
                    reached.add(o)
                    stack.append(o)
    if any(o.name in reached for o in g.output):
        return
    outs = ", ".join(f"'{safe_name(o.name)}'" for o in g.output[:5]) + (", ..." if len(g.output) > 5 else "")
    ins = ", ".join(f"'{safe_name(i.name)}'" for i in real_inputs[:5]) + (", ..." if len(real_inputs) > 5 else "")
    raise UnsupportedModel(
        f"No graph output ({outs}) depends on a graph input ({ins}): the model computes constants from its weights, "
        "so every quantized file would return the same numbers whatever the input, and there is nothing to calibrate "
        "or compare.",
        hint="Re-export with the inputs the model really reads (a tracer that folded an input into a constant, or "
             "outputs taken from the wrong node, give this), then upload it again.")


def _run_onnx_checker(model, model_path: Path | None, *, has_external: bool) -> None:
    import onnx

    target = model
    if has_external:
        # Given a proto, onnx's checker resolves external locations against the process's current
        # directory; given the path, against the model's folder (already validated above).
        if model_path is None:
            target = onnx.ModelProto()
            target.CopyFrom(model)
            _strip_external(target)
        else:
            target = str(model_path)

    # Structural validation in onnx's own C++ checker (types, attributes, schemas, SSA). Runs
    # after our budgets so it only ever sees bounded models; external data stays unloaded.
    try:
        onnx.checker.check_model(target, full_check=False)
    except onnx.checker.ValidationError as e:
        msg = str(e).splitlines()[0][:300] if str(e) else "validation failed"
        if "No Op registered" in msg or "No Schema registered" in msg:
            raise UnsupportedModel(f"The model uses an operator onnx does not know: {safe_name(msg)}",
                                   hint="Use standard ONNX operators only.") from e
        shapeless = [vi.name for vi in (*model.graph.input, *model.graph.output)
                     if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
        if not has_external and _only_outputs_shapeless(model, msg):
            return  # fp32.py writes the reference with the shapes inference gives (output_shapes.py)
        if not has_external and "topologically sorted" in msg and _only_out_of_order(model):
            return  # fp32.py writes the reference with its nodes sorted (node_order.py), as ORT sorts them
        if "Field 'shape' of 'type' is required" in msg and shapeless:
            # ORT runs such a file; onnx's checker (and so this service) needs the field on graph inputs/outputs
            raise InvalidModel(f"The model fails ONNX validation: {safe_name(msg)} (graph input/output "
                               f"{', '.join(repr(safe_name(n)) for n in shapeless[:5])})",
                               hint="give every graph input and output a shape; its dims may be symbolic "
                                    "(helper.make_tensor_value_info(name, type, ['batch', None]) rather than "
                                    "shape=None), then upload it again") from e
        raise InvalidModel(f"The model fails ONNX validation: {safe_name(msg)}", hint=_UPLOAD_HINT) from e
    except Exception as e:
        raise InvalidModel("The model fails ONNX validation.", hint=_UPLOAD_HINT) from e


# ONNX-domain ops ORT registers as contrib kernels below their ONNX opset (onnxruntime/contrib_ops/cpu:
# LayerNormalization and SimplifiedLayerNormalization, kOnnxDomain versions 1..16).
_ORT_ONNX_DOMAIN_CONTRIB = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})


def _only_out_of_order(model) -> bool:
    """Once its nodes are sorted (what ORT does when it loads a graph), the checker has nothing left
    to say. Inline weights only, as ``_only_outputs_shapeless``."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if not sort_nodes(copy.graph):
        return False
    try:
        onnx.checker.check_model(copy, full_check=False)
    except Exception:  # noqa: BLE001 - the original complaint stands
        return False
    return True


def _only_outputs_shapeless(model, msg: str) -> bool:
    """The checker's complaint is a graph output without a shape or type, and once inference gives
    every such output one, the checker has nothing left to say. (Inline weights only: a copy of an
    external-data model would have to hold its weights for the checker.)"""
    import onnx

    if "is required but missing" not in msg or not shapeless_outputs(model):
        return False
    if any(vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape") for vi in model.graph.input):
        return False
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    if set(outputs_given_inferred_shapes(typed)) != set(shapeless_outputs(model)):
        return False
    try:
        onnx.checker.check_model(typed, full_check=False)
    except Exception:  # noqa: BLE001 - something else is wrong too: the original refusal stands
        return False
    return True


# ---------------------------------------------------------------------------------------------
# the walk: nodes, subgraphs, tensors, constants


@dataclass
class ModelStats:
    nodes: int = 0
    initializer_bytes: int = 0
    external_bytes: int = 0
    max_depth: int = 0
    op_types: set[str] = field(default_factory=set)


_DTYPE_SIZES = {
    1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
    17: 1, 18: 1, 19: 1, 20: 1, 21: 1, 22: 1, 23: 1, 24: 1, 25: 1, 26: 1,
}


_STRING = 8
# Module hierarchies exported as functions nest a call per level; far past any real model's depth.
MAX_FUNCTION_CALL_DEPTH = 64


def _refuse_repeated_node_names(nodes) -> None:
    """ORT refuses to load a graph where two nodes share a non-empty name ("This is an invalid model.
    Error: two nodes with same node name", graph.cc ``Graph::VerifyNoDuplicateName``, checked per
    graph: a subgraph may reuse a name of its parent). onnx's checker lets it through, so without
    this check every path of such an upload failed inside ORT. Exporters do write it: onnxconverter-
    common's float16 conversion names one boundary Cast per reader of a tensor alike.
    Constant nodes do not count: the Graph constructor turns each into an initializer and erases it
    before AddNode, so the check never sees them (silero-vad 6.2.3's silero_vad_openvino_16k.onnx names
    15 Constants 'F0::anon' and loads)."""
    repeated = {name: k for name, k in Counter(n.name for n in nodes if n.name and not (
        n.op_type == "Constant" and is_onnx_domain(n.domain))).items() if k > 1}
    if repeated:
        shown = ", ".join(f"'{safe_name(name)}' ({k} nodes)" for name, k in list(repeated.items())[:3])
        more = f" and {len(repeated) - 3} more names" if len(repeated) > 3 else ""
        raise InvalidModel(
            f"Several nodes share a name: {shown}{more}. ONNX Runtime refuses to load such a file "
            "('two nodes with same node name'), so no path could run it.",
            hint="Give every node its own name (node names are labels only; tensor names carry the edges), e.g. "
                 "`for i, n in enumerate(model.graph.node): n.name = f'{n.name or n.op_type}_{i}'`, and upload again.")


def _refuse_function_shadowing_an_operator(fn, model) -> None:
    """A model-local function named like an operator its domain has at the model's opset (``Relu`` in ai.onnx)
    means two things: onnxruntime and onnx's reference evaluator run the operator, onnx's inliner (and what
    reads an inlined copy) the function's body; the PT2E path then failed parity vs ORT with no word on why.
    A function standing in for an operator of a later opset (``Gelu`` at opset 17) is what exporters write, and
    is taken: no operator of that name exists at the model's opset."""
    import onnx.defs

    domain = onnx_domain_name(fn.domain)
    if domain not in ("", "ai.onnx.ml"):
        return
    version = next((o.version for o in model.opset_import if onnx_domain_name(o.domain) == domain),
                   None)
    if version is None:
        return
    try:
        onnx.defs.get_schema(fn.name, max_inclusive_version=version, domain=domain)
    except onnx.defs.SchemaError:
        return
    raise InvalidModel(
        f"Model-local function '{safe_name(fn.name)}' is in domain '{domain or 'ai.onnx'}', which has an operator of "
        f"that name at the model's opset {version}: ONNX Runtime runs the operator, onnx's function inliner the "
        "function's body, so the model means two things.",
        hint="Put the function in a domain of its own (FunctionProto.domain and the calling nodes' domain, plus an "
             "opset_import for it), or rename it, then upload again.")


def itemsize_of(data_type: int) -> int:
    return _DTYPE_SIZES.get(data_type, 8)  # STRING (8) counted at 8 bytes a pointer at least


class _Walker:
    def __init__(self, model, *, budgets: Budgets, model_dir: Path | None, allowed_data_files: set[str],
                 domains: set[str]):
        self.model = model
        self.b = budgets
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.allowed = allowed_data_files
        self.domains = domains
        self.stats = ModelStats()
        self.opset = {imp.domain or "": imp.version for imp in model.opset_import}
        self.opset.setdefault("", self.opset.get("ai.onnx", 0))
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self._inlined: dict[tuple[str, str], int] = {}

    def run(self) -> None:
        self._graph(self.model.graph, depth=0, outer_names=set(), outer_consts={})
        for fn in self.model.functions:
            self._function(fn)

    # -- graphs -------------------------------------------------------------------------------

    def _graph(self, g, *, depth: int, outer_names: set[str], outer_consts: dict[str, np.ndarray]) -> None:
        if depth > self.b.max_subgraph_depth:
            raise self.b.refuse("max_subgraph_depth", "subgraph nesting depth", depth)
        self.stats.max_depth = max(self.stats.max_depth, depth)

        consts: dict[str, np.ndarray] = dict(outer_consts)
        shapes: dict[str, tuple[int, ...]] = {}
        for t in g.initializer:
            self._tensor(t, where=f"initializer '{safe_name(t.name)}'")
            shapes[t.name] = tuple(t.dims)
            v = _small_array(t)
            if v is not None:
                consts[t.name] = v
        for sp in g.sparse_initializer:
            self._sparse(sp, where=f"sparse initializer '{safe_name(sp.values.name)}'")
            shapes[sp.values.name] = tuple(sp.dims)

        defined = set(outer_names) | {i.name for i in g.input} | set(shapes)
        const_derived = set(consts) | set(shapes)  # values known before any input arrives
        order = self._topo_order(g, defined)
        self._count(len(order))

        for node in order:
            self._node(node, depth=depth, defined=defined, consts=consts, shapes=shapes,
                       const_derived=const_derived)
            defined.update(o for o in node.output if o)

    def _function(self, fn) -> None:
        """A body is checked like a graph (its own constants: a ConstantOfShape or a Loop's trip
        count inside a function was only bounded by the job's timeout), and each call site counts
        the nodes the call inlines to (``_inlined_nodes``)."""
        _refuse_function_shadowing_an_operator(fn, self.model)
        self._count(len(fn.node))
        consts: dict[str, np.ndarray] = {}
        shapes: dict[str, tuple[int, ...]] = {}
        const_derived: set[str] = set()
        defined = set(fn.input)
        for node in fn.node:
            self._node(node, depth=0, defined=defined, consts=consts, shapes=shapes, const_derived=const_derived,
                       in_function=True)
            defined.update(o for o in node.output if o)

    def _inlined_nodes(self, key: tuple[str, str], stack: tuple = ()) -> int:
        """Nodes a call of function ``key`` stands for once inlined (what ORT and onnx's inliner build):
        a 2 KB file of ten functions each calling the next ten times is 10^7 nodes."""
        if key in self._inlined:
            return self._inlined[key]
        if key in stack:
            raise InvalidModel(f"Function '{safe_name(key[1])}' calls itself (through {len(stack)} functions).",
                               hint=_UPLOAD_HINT)
        if len(stack) > MAX_FUNCTION_CALL_DEPTH:  # this count recurses with the calls (Python's limit is 1000)
            raise UnsupportedModel(f"Local functions call each other {len(stack)} deep (through "
                                   f"'{safe_name(key[1])}'); this toolchain reads at most {MAX_FUNCTION_CALL_DEPTH}.",
                                   hint="Inline the functions (onnx.inliner.inline_local_functions) and upload again.")
        total = 0
        for node in self.functions[key].node:
            callee = (node.domain, node.op_type)
            total += self._inlined_nodes(callee, stack + (key,)) if callee in self.functions else 1
            if total > self.b.max_nodes:
                break  # enough to refuse; the rest is not counted
        self._inlined[key] = total
        return total

    def _count(self, n: int) -> None:
        self.stats.nodes += n
        if self.stats.nodes > self.b.max_nodes:
            raise self.b.refuse("max_nodes", "nodes (subgraphs and functions included)", self.stats.nodes)

    def _topo_order(self, g, defined: set[str]) -> list:
        nodes = list(g.node)
        if len(nodes) + self.stats.nodes > self.b.max_nodes:
            raise self.b.refuse("max_nodes", "nodes (subgraphs and functions included)", len(nodes) + self.stats.nodes)
        _refuse_repeated_node_names(nodes)
        producer: dict[str, int] = {}
        for i, n in enumerate(nodes):
            for o in n.output:
                if not o:
                    continue
                if o in producer or o in defined:
                    raise InvalidModel(f"Value '{safe_name(o)}' is produced more than once (graphs must be SSA).",
                                       hint=_UPLOAD_HINT)
                producer[o] = i
        deps: list[set[int]] = []
        for i, n in enumerate(nodes):
            mine = set()
            for name in list(n.input) + _implicit_inputs(n):
                if not name:
                    continue
                if name in producer:
                    mine.add(producer[name])
                elif name not in defined:
                    raise InvalidModel(
                        f"Node '{safe_name(n.name or n.op_type)}' reads '{safe_name(name)}', which no node, input or "
                        "initializer defines.", hint=_UPLOAD_HINT)
            if i in mine:
                raise InvalidModel(f"Node '{safe_name(n.name or n.op_type)}' consumes its own output (a cycle).",
                                   hint=_UPLOAD_HINT)
            deps.append(mine)
        order = topological_order(deps)
        if order is None:
            raise InvalidModel("The graph has a cycle: some nodes depend on their own outputs.", hint=_UPLOAD_HINT)
        return [nodes[i] for i in order]

    # -- nodes --------------------------------------------------------------------------------

    def _check_op(self, node) -> None:
        import onnx

        dom = node.domain or ""
        self.stats.op_types.add(f"{dom}.{node.op_type}" if dom else node.op_type)
        if dom not in self.domains and dom != "ai.onnx":
            imported = any(imp.domain == dom for imp in self.model.opset_import)
            raise UnsupportedModel(
                f"Node '{safe_name(node.name or node.op_type)}' ({safe_name(node.op_type)}) uses operator domain '{safe_name(dom)}', "
                + ("which this toolchain cannot run." if imported else "which the model does not import."),
                hint="Only ai.onnx, ai.onnx.ml and com.microsoft operators (and the model's own functions) are "
                     "supported; export the model with standard operators.", domain=safe_name(dom))
        if (dom, node.op_type) in self.functions:
            return
        if dom in _SCHEMA_DOMAINS:
            version = self.opset.get(dom, self.opset.get("", 0)) if dom != "ai.onnx" else self.opset.get("", 0)
            try:
                onnx.defs.get_schema(node.op_type, version, onnx_domain_name(dom))
            except Exception as e:
                # ORT registers these in the ONNX domain below the opset that introduced them, and its
                # LayerNormFusion writes them there: a file ORT saved after optimizing it (optimized_model_filepath).
                ort_saved = is_onnx_domain(dom) and node.op_type in _ORT_ONNX_DOMAIN_CONTRIB
                hint = ("this file looks saved by ONNX Runtime after optimizing it (ORT writes its own "
                        f"{safe_name(node.op_type)} into the ONNX domain below opset 17): upload the model as exported, "
                        "before any ORT optimization; this report shows what each ORT level does to it"
                        if ort_saved else "Use standard ONNX operators available at the model's opset.")
                raise UnsupportedModel(
                    f"Operator '{safe_name(node.op_type)}' does not exist in {'ai.onnx' if is_onnx_domain(dom) else dom} "
                    f"opset {version}.", hint=hint, op_type=safe_name(node.op_type)) from e

    def _node(self, node, *, depth: int, defined: set[str], consts: dict, shapes: dict, const_derived: set,
              in_function: bool = False) -> None:
        self._check_op(node)
        call = (node.domain, node.op_type)
        if call in self.functions and not in_function:
            # a call in the model's graphs stands for its inlined body; in a body, the callers count it
            self._count(self._inlined_nodes(call) - 1)  # the call node itself is counted already
        for a in node.attribute:
            self._attribute(a, node, depth=depth + 1, defined=defined, consts=consts)

        inputs = [i for i in node.input if i]
        is_const = all(i in const_derived for i in inputs) and not _implicit_inputs(node)
        if is_const and node.op_type not in RANDOM_LIKE_OPS:
            const_derived.update(o for o in node.output if o)

        if node.op_type == "Constant" and is_onnx_domain(node.domain):
            v = _constant_value(node)
            if v is not None and node.output:
                consts[node.output[0]] = v
                shapes[node.output[0]] = tuple(v.shape)
            elif node.output:
                t = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
                if t is not None:
                    shapes[node.output[0]] = tuple(t.dims)
        elif node.op_type in _FOLDABLE and is_onnx_domain(node.domain):
            _fold(node, consts, shapes)

        if is_onnx_domain(node.domain) and node.op_type in _AMPLIFIERS:
            self._amplifier(node, consts, shapes, const_derived)
        if node.op_type == "Loop" and not (node.input and node.input[0] in consts):
            body = next((a.g for a in node.attribute if a.name == "body" and a.HasField("g")), None)
            if body is not None and not body.node:
                # ORT checks a run's terminate flag before each node it runs (ort/sessions.run_within):
                # an empty body gives it none, so nothing stops such a Loop before its trip count ends.
                raise UnsupportedModel(
                    f"Loop '{safe_name(node.name)}' has no node in its body and no constant trip count: ONNX Runtime "
                    "could not stop it at a time limit, and its trip count comes from values computed at run time.",
                    hint="give the Loop a constant trip count (an initializer), or drop it: a body without nodes "
                         "only passes its values through", op_type="Loop")
        if node.op_type == "Loop" and node.input and node.input[0] in consts:
            trips = consts[node.input[0]]
            if trips.size == 1 and int(trips.reshape(-1)[0]) > self.b.max_loop_trip_count:
                raise self.b.refuse("max_loop_trip_count", f"Loop '{safe_name(node.name)}' trip count",
                                    int(trips.reshape(-1)[0]))

    def _attribute(self, a, node, *, depth: int, defined: set[str], consts: dict) -> None:
        where = f"attribute '{safe_name(a.name)}' of node '{safe_name(node.name or node.op_type)}'"
        if a.HasField("t"):
            self._tensor(a.t, where=where)
        for t in a.tensors:
            self._tensor(t, where=where)
        if a.HasField("sparse_tensor"):
            self._sparse(a.sparse_tensor, where=where)
        for s in a.sparse_tensors:
            self._sparse(s, where=where)
        graphs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
        for g in graphs:
            self._graph(g, depth=depth, outer_names=set(defined), outer_consts=consts)

    def _amplifier(self, node, consts: dict, shapes: dict, const_derived: set) -> None:
        op = node.op_type
        ins = list(node.input) + [""] * 4
        out_elems: int | None = None
        itemsize = 4
        unknown_const = False

        def val(name):
            return consts.get(name) if name else None

        if op == "ConstantOfShape":
            v = next((a.t for a in node.attribute if a.name == "value"), None)
            itemsize = itemsize_of(v.data_type) if v is not None else 4
            s = val(ins[0])
            if s is not None:
                out_elems = _prod_nonneg(s)
            elif ins[0] in const_derived:
                unknown_const = True
        elif op == "Expand":
            s = val(ins[1])
            if s is not None:
                xs = shapes.get(ins[0], ())
                out_elems = _broadcast_elems(xs, s)
            elif ins[1] in const_derived and ins[0] in const_derived:
                unknown_const = True
        elif op == "Tile":
            r = val(ins[1])
            if r is not None and ins[0] in shapes:
                xs = shapes[ins[0]]
                reps = [int(x) for x in r.reshape(-1)]
                if len(reps) == len(xs):
                    out_elems = _prod_nonneg(np.array([a * b for a, b in zip(xs, reps)], dtype=object))
            elif r is not None and ins[0] in const_derived:
                unknown_const = True
            elif r is not None:
                out_elems = _prod_nonneg(r)  # lower bound: one element repeated
            elif ins[0] in const_derived and ins[1] in const_derived:
                unknown_const = True
        elif op == "Range":
            vs = [val(i) for i in ins[:3]]
            if all(v is not None and v.size == 1 for v in vs):
                start, limit, delta = (float(v.reshape(-1)[0]) for v in vs)
                if delta == 0 or not all(math.isfinite(x) for x in (start, limit, delta)):
                    raise InvalidModel(f"Range node '{safe_name(node.name)}' has a zero or non-finite delta.")
                out_elems = max(0, math.ceil((limit - start) / delta))
                itemsize = vs[0].dtype.itemsize
            elif all(i in const_derived for i in ins[:3] if i):
                unknown_const = True
        elif op in ("RandomNormal", "RandomUniform"):
            shp = next((list(a.ints) for a in node.attribute if a.name == "shape"), [])
            out_elems = _prod_nonneg(np.array(shp, dtype=object))
        elif op == "OneHot":
            d = val(ins[1])
            if d is not None and d.size == 1 and ins[0] in shapes:
                out_elems = math.prod(shapes[ins[0]]) * max(0, int(d.reshape(-1)[0]))
        elif op == "Pad":
            p = val(ins[1])
            if p is not None and ins[0] in shapes:
                xs = shapes[ins[0]]
                pads = [int(x) for x in p.reshape(-1)]
                if len(pads) == 2 * len(xs):
                    out_elems = math.prod(max(0, d + pads[i] + pads[i + len(xs)]) for i, d in enumerate(xs))
        elif op in ("Resize", "Upsample"):
            x = ins[0]
            scales = val(ins[2]) if op == "Resize" else val(ins[1])
            sizes = val(ins[3]) if op == "Resize" else None
            if sizes is not None and sizes.size:
                out_elems = _prod_nonneg(sizes)
            elif scales is not None and scales.size and x in shapes and len(shapes[x]) == scales.size:
                out_elems = math.prod(int(d * float(s)) for d, s in zip(shapes[x], scales.reshape(-1)))
        if unknown_const:
            raise UnsupportedModel(
                f"The output size of {op} node '{safe_name(node.name)}' is computed from constants this check cannot "
                "evaluate, so it cannot be bounded before running.",
                hint="Fold constants before uploading (e.g. onnxruntime's offline optimization or onnxscript's optimizer).",
            )
        if out_elems is not None and out_elems * itemsize > self.b.max_constant_output_bytes:
            raise self.b.refuse("max_constant_output_bytes", f"output of {op} node '{safe_name(node.name)}'",
                                out_elems * itemsize, unit="bytes")

    # -- tensors ------------------------------------------------------------------------------

    def _dense_bytes(self, t, where: str) -> int:
        if t.data_type not in _DTYPE_SIZES and t.data_type != _STRING:
            # ONNX defines no such type: it was counted as 8-byte items, then broke the job's inspect stage
            raise InvalidModel(f"Tensor in {where} has data_type {t.data_type}, which ONNX does not define.",
                               hint=_UPLOAD_HINT)
        if any(d < 0 for d in t.dims):
            raise InvalidModel(f"Tensor in {where} has a negative dimension.", hint=_UPLOAD_HINT)
        n = math.prod(t.dims) * itemsize_of(t.data_type)
        if n > self.b.max_tensor_bytes:
            raise self.b.refuse("max_tensor_bytes", f"tensor in {where}", n, unit="bytes")
        return n

    def _add_bytes(self, n: int) -> None:
        self.stats.initializer_bytes += n
        if self.stats.initializer_bytes > self.b.max_initializer_bytes:
            raise self.b.refuse("max_initializer_bytes", "initializer and constant data (dense, shared ranges "
                                "counted per use)", self.stats.initializer_bytes, unit="bytes")

    def _tensor(self, t, *, where: str) -> None:
        n = self._dense_bytes(t, where)
        if _is_external(t):
            if self.model_dir is None:
                raise InvalidModel(f"Tensor in {where} refers to external data, which needs the model's folder.")
            length = _check_external_location(t, self.model_dir, self.allowed, where=where)
            if t.data_type != 8 and length != n:
                raise InvalidModel(f"Tensor in {where} declares {n} bytes but its external range holds {length}.",
                                   hint=_UPLOAD_HINT)
            self.stats.external_bytes += length
        elif t.HasField("raw_data") and t.data_type != 8 and len(t.raw_data) != n:
            raise InvalidModel(f"Tensor in {where} declares {n} bytes but holds {len(t.raw_data)} bytes of raw data.",
                               hint=_UPLOAD_HINT)
        self._add_bytes(n)

    def _sparse(self, sp, *, where: str) -> None:
        # ORT densifies sparse initializers at session creation: count the dense size.
        if any(d < 0 for d in sp.dims):
            raise InvalidModel(f"Sparse tensor in {where} has a negative dimension.", hint=_UPLOAD_HINT)
        dense = math.prod(sp.dims) * itemsize_of(sp.values.data_type)
        if dense > self.b.max_tensor_bytes:
            raise self.b.refuse("max_tensor_bytes", f"sparse tensor in {where} (dense size)", dense, unit="bytes")
        self._tensor(sp.values, where=where)
        self._tensor(sp.indices, where=where)
        self._add_bytes(dense)


# ---------------------------------------------------------------------------------------------
# external data


def _is_external(t) -> bool:
    return t.data_location == 1  # TensorProto.EXTERNAL


# The keys onnxruntime 1.32 reads in a tensor's external_data (core/framework/tensor_external_data_info.cc,
# ExternalDataInfo::Create); any other key fails the session with "model format error!" and nothing more.
_EXTERNAL_DATA_KEYS = frozenset({"location", "offset", "length", "checksum"})


def _check_external_location(t, model_dir: Path, allowed: set[str], *, where: str) -> int:
    """Validate one external reference; return the byte length it covers."""
    info = {e.key: e.value for e in t.external_data}
    unknown = sorted(set(info) - _EXTERNAL_DATA_KEYS)
    if unknown:
        raise InvalidModel(
            f"Tensor in {where} has external data key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(safe_name(k)) for k in unknown[:3])}, which ONNX Runtime does not read: it refuses the "
            "file with 'model format error!' (ExternalDataInfo::Create takes location, offset, length and checksum).",
            hint="remove the key from the tensor's external_data (onnx's set_external_data writes 'basepath' when "
                 "given one; onnx.save writes only location, offset and length), then upload again")
    loc = info.get("location", "")
    bad = (
        not loc
        or loc in (".", "..")
        or "/" in loc
        or "\\" in loc
        or "\x00" in loc
        or ":" in loc
        or loc.startswith("~")
        or os.path.isabs(loc)
        or len(loc) > 255
    )
    if bad:
        raise InvalidModel(
            f"Tensor in {where} has an external data location that is not a plain file name in the model's folder.",
            hint="External data files must sit next to the .onnx file and be referenced by bare file name.",
        )
    if loc not in allowed:
        raise InvalidModel(
            f"Tensor in {where} refers to external data file '{safe_name(loc)}', which is not among the files "
            "given with the model (uploaded with it in an archive, or beside it in its folder for the CLI).",
            hint="Upload a .zip or .tar of the .onnx file together with its external data files (the CLI reads them "
            "from the model's folder), or embed the data (onnx.save(model, path, save_as_external_data=False)).",
        )
    full = model_dir / loc
    try:
        st = os.lstat(full)
    except OSError as e:
        raise InvalidModel(f"External data file '{safe_name(loc)}' is missing.") from e
    real_dir = os.path.realpath(model_dir)
    if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1
            or os.path.dirname(os.path.realpath(full)) != real_dir):
        raise InvalidModel(
            f"External data file '{safe_name(loc)}' is a link or not a regular file inside the model's folder.",
            hint="Upload external data as plain files.",
        )
    try:
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else st.st_size - offset
    except ValueError as e:
        raise InvalidModel(f"Tensor in {where} has an external data offset or length that is not an integer.",
                           hint=_UPLOAD_HINT) from e
    if offset < 0 or length < 0:
        raise InvalidModel(f"Tensor in {where} has a negative external data offset or length.", hint=_UPLOAD_HINT)
    if offset + length > st.st_size:
        raise InvalidModel(f"Tensor in {where} points past the end of external data file '{safe_name(loc)}'.",
                           hint=_UPLOAD_HINT)
    return length


def _strip_external(model) -> None:
    for t, _ in _iter_model_tensors(model):
        if _is_external(t):
            del t.external_data[:]
            t.data_location = 0
            t.raw_data = b"\0" * (math.prod(t.dims) * itemsize_of(t.data_type))


def _iter_model_tensors(model) -> Iterator[tuple["onnx.TensorProto", str]]:
    def graph(g):
        for t in g.initializer:
            yield t, f"initializer '{safe_name(t.name)}'"
        for sp in g.sparse_initializer:
            yield sp.values, "sparse initializer"
            yield sp.indices, "sparse initializer"
        for n in g.node:
            yield from nodes_attr(n)

    def nodes_attr(n):
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t, f"attribute '{safe_name(a.name)}'"
            for t in a.tensors:
                yield t, f"attribute '{safe_name(a.name)}'"
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values, "sparse attribute"
                yield a.sparse_tensor.indices, "sparse attribute"
            if a.HasField("g"):
                yield from graph(a.g)
            for g in a.graphs:
                yield from graph(g)

    yield from graph(model.graph)
    for f in model.functions:
        for n in f.node:
            yield from nodes_attr(n)


# ---------------------------------------------------------------------------------------------
# tiny constant evaluator for shape-like tensors


def _small_array(t) -> np.ndarray | None:
    if _is_external(t) or t.data_type not in (1, 6, 7, 11, 10, 2, 3, 9, 12, 13):
        return None
    n = math.prod(t.dims)
    if n > _FOLD_MAX_ELEMENTS:
        return None
    try:
        from onnx import numpy_helper

        return np.asarray(numpy_helper.to_array(t))
    except Exception:
        return None


def _constant_value(node) -> np.ndarray | None:
    for a in node.attribute:
        if a.name == "value" and a.HasField("t"):
            return _small_array(a.t)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
    return None


def _fold(node, consts: dict, shapes: dict) -> None:
    op = node.op_type
    ins = list(node.input)
    out = node.output[0] if node.output else ""
    if not out:
        return
    attrs = {a.name: a for a in node.attribute}

    def ai(name, default=None):
        a = attrs.get(name)
        if a is None:
            return default
        return list(a.ints) if a.ints else a.i

    try:
        if op == "Shape" and ins and ins[0] in shapes:
            s = np.array(shapes[ins[0]], dtype=np.int64)
            start, end = ai("start", 0), ai("end", None)
            consts[out] = s[start:end]
        elif op == "Size" and ins and ins[0] in shapes:
            consts[out] = np.array(math.prod(shapes[ins[0]]), dtype=np.int64)
        else:
            vals = [consts.get(i) if i else None for i in ins]
            if not ins or vals[0] is None:
                return
            x = vals[0]
            r: np.ndarray | None = None
            if op == "Identity":
                r = x
            elif op == "Cast":
                import onnx

                r = x.astype(onnx.helper.tensor_dtype_to_np_dtype(ai("to")))
            elif op == "Concat":
                if any(v is None for v in vals):
                    return
                r = np.concatenate([np.atleast_1d(v) for v in vals], axis=ai("axis", 0))
            elif op in ("Unsqueeze", "Squeeze"):
                axes = list(vals[1].reshape(-1)) if len(vals) > 1 and vals[1] is not None else ai("axes", None)
                if op == "Unsqueeze":
                    r = x
                    for ax in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
                        r = np.expand_dims(r, ax)
                else:
                    r = np.squeeze(x, axis=tuple(int(a) for a in axes) if axes else None)
            elif op == "Reshape" and len(vals) > 1 and vals[1] is not None:
                shp = [int(s) for s in vals[1].reshape(-1)]
                shp = [x.shape[i] if s == 0 else s for i, s in enumerate(shp)]
                r = x.reshape(shp)
            elif op == "Flatten":
                r = x.reshape(-1)
            elif op in ("Mul", "Add", "Sub", "Div", "Max", "Min") and len(vals) > 1 and all(v is not None for v in vals):
                with np.errstate(all="ignore"):
                    fn = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Max": np.maximum,
                          "Min": np.minimum}.get(op)
                    if op == "Div":
                        r = (vals[0] // vals[1]) if vals[0].dtype.kind in "iu" else vals[0] / vals[1]
                    else:
                        r = vals[0]
                        for v in vals[1:]:
                            r = fn(r, v)
                    # int64 overflow is how a 1 GB shape hides behind small factors: use exact ints
                    if r.dtype.kind in "iu":
                        exact = vals[0].astype(object)
                        for v in vals[1:]:
                            exact = {"Mul": lambda a, b: a * b, "Add": lambda a, b: a + b,
                                     "Sub": lambda a, b: a - b, "Div": lambda a, b: a // b if np.all(b) else a,
                                     "Max": np.maximum, "Min": np.minimum}[op](exact, v.astype(object))
                        r = np.asarray(exact)
            elif op == "Abs":
                r = np.abs(x)
            elif op == "Neg":
                r = -x
            elif op == "Gather" and len(vals) > 1 and vals[1] is not None:
                r = np.take(x, vals[1].astype(np.int64), axis=ai("axis", 0))
            elif op == "Slice" and len(vals) >= 3 and vals[1] is not None and vals[2] is not None and x.ndim == 1:
                step = int(vals[4].reshape(-1)[0]) if len(vals) > 4 and vals[4] is not None else 1
                r = x[int(vals[1].reshape(-1)[0]):int(vals[2].reshape(-1)[0]):step or 1]
            elif op in ("ReduceProd", "ReduceSum") and len(vals) == 1:
                r = np.array(math.prod(x.reshape(-1).tolist()) if op == "ReduceProd" else sum(x.reshape(-1).tolist()))
            if r is not None and np.asarray(r).size <= _FOLD_MAX_ELEMENTS:
                consts[out] = np.asarray(r)
                shapes[out] = tuple(np.asarray(r).shape)
    except Exception:
        return  # not foldable here; the amplifier check treats it as "constant but unknown"


def _prod_nonneg(a: np.ndarray) -> int:
    vals = [int(v) for v in np.asarray(a).reshape(-1).tolist()]
    if any(v < 0 for v in vals):
        return 0
    return math.prod(vals)


def _broadcast_elems(xs: tuple[int, ...], shape: np.ndarray) -> int:
    s = [int(v) for v in np.asarray(shape).reshape(-1).tolist()]
    n = max(len(xs), len(s))
    xs2 = [1] * (n - len(xs)) + list(xs)
    s2 = [1] * (n - len(s)) + s
    return math.prod(max(a, b, 0) for a, b in zip(xs2, s2))


def _implicit_inputs(node) -> list[str]:
    """Outer-scope names a node's subgraphs read (they order the node after their producers)."""
    names: list[str] = []
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            local = {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
            for n in g.node:
                names.extend(i for i in n.input if i and i not in local)
                names.extend(i for i in _implicit_inputs(n) if i not in local)
    return names


def safe_name(s: str, limit: int = 80) -> str:
    """A name from the upload, shortened and stripped of control characters, for messages."""
    s = "".join(ch if ch.isprintable() else "?" for ch in str(s))
    return s if len(s) <= limit else s[: limit - 3] + "..."


__all__ = [
    "ModelStats",
    "check_input_elements",
    "check_onnx_model",
    "load_external_data_from_job_folder",
    "onnx_model_from_path",
]
