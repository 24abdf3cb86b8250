"""Clean-ups that turn a third-party ONNX file into one onnx2torch can convert.

Real files carry what their exporter left behind: initializers repeated in the input list (old
exporters), symbolic dims that hide every ``Shape -> Gather -> Reshape`` chain behind a value only
known at run time, ``If`` nodes that branch on an input the caller always sets to one value (a
sample rate), opset versions newer than onnx2torch's converters. Each step here is standard
ONNX in, standard ONNX out, and says what it did in a note; none of them touches the fp32
artifact or the ORT paths, only the copy that becomes a torch graph for PT2E.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from service.pipeline.quantize.shortcuts.pt2e import install_multi_output_match_shortcut
from service.pipeline.vocabulary import HALF_ELEM_TYPES, computes_in_half, rename_reads

log = logging.getLogger(__name__)

CONTROL_FLOW = ("If", "Loop", "Scan")


@dataclass
class CleanedModel:
    model: object  # onnx.ModelProto
    notes: list[str] = field(default_factory=list)
    baked_inputs: list[str] = field(default_factory=list)  # inputs folded in as constants


def drop_initializer_inputs(graph) -> int:
    """Take the initializers off ``graph``'s input list (legal from IR 4 on); how many were listed."""
    inits = {i.name for i in graph.initializer}
    kept = [i for i in graph.input if i.name not in inits]
    dropped = len(graph.input) - len(kept)
    if dropped:
        del graph.input[:]
        graph.input.extend(kept)
    return dropped


def _drop_initializer_inputs(model, notes: list[str]) -> None:
    if dropped := drop_initializer_inputs(model.graph):
        notes.append(f"dropped {dropped} initializers that were also listed as graph inputs")


def _bake_inputs(model, constants: dict[str, np.ndarray], notes: list[str]) -> list[str]:
    """Turn inputs that hold one value in every sample into initializers, so If/Shape on them fold."""
    from onnx import numpy_helper

    baked = []
    kept = []
    for vi in model.graph.input:
        value = constants.get(vi.name)
        if value is None:
            kept.append(vi)
            continue
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), vi.name))
        baked.append(vi.name)
    if baked:
        del model.graph.input[:]
        model.graph.input.extend(kept)
        shown = ", ".join(f"{n}={_short(constants[n])}" for n in baked)
        notes.append(f"inputs that hold one value in every calibration sample were folded in as constants: {shown}")
    return baked


def _short(value: np.ndarray) -> str:
    arr = np.asarray(value)
    return str(arr.item()) if arr.size == 1 else f"<{arr.dtype} {list(arr.shape)}>"


def _fix_input_shapes(model, shapes: dict[str, tuple[int, ...]], notes: list[str],
                      keep_dynamic: dict[str, set[int]]) -> None:
    fixed = []
    for vi in model.graph.input:
        want = shapes.get(vi.name)
        if want is None or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = tt.shape.dim
        if len(dims) != len(want) and len(dims) != 0:
            continue
        if len(dims) == 0 and want:
            for _ in want:
                dims.add()
        changed = False
        for i, (d, value) in enumerate(zip(dims, want)):
            if i in keep_dynamic.get(vi.name, ()):
                continue  # the batch stays symbolic so the torch graph keeps a dynamic batch
            if not (d.HasField("dim_value") and d.dim_value == value):
                d.ClearField("dim_param")
                d.dim_value = int(value)
                changed = True
        if changed:
            fixed.append(f"{vi.name}{list(want)}")
    if fixed:
        # Intermediate value_info from the exporter may disagree with the fixed shapes.
        del model.graph.value_info[:]
        notes.append("fixed input shapes for the conversion: " + ", ".join(fixed))


def _fold_constants(model, notes: list[str]):
    """onnxscript's optimizer: constant folding (Shape of a now-static tensor, If on a constant)."""
    try:
        from onnxscript import optimizer

        install_multi_output_match_shortcut()  # the same rewrites without a whole-graph index per node
        before = Counter(n.op_type for n in model.graph.node)
        folded = optimizer.optimize(model, num_iterations=3)
        after = Counter(n.op_type for n in folded.graph.node)
        removed = sum(before.values()) - sum(after.values())
        if removed > 0:
            gone_cf = {op: before[op] - after.get(op, 0) for op in CONTROL_FLOW if before[op] - after.get(op, 0) > 0}
            extra = ""
            if gone_cf:
                extra = " (" + ", ".join(f"{op} x{n}" for op, n in gone_cf.items()) + " folded away)"
            notes.append(f"constant folding removed {removed} of {sum(before.values())} nodes{extra}")
        return folded
    except Exception as e:  # noqa: BLE001 - folding is an improvement, never a requirement
        log.info("constant folding failed: %r", e)
        notes.append(f"constant folding skipped ({type(e).__name__})")
        return model


# onnx2torch's converters stop at opset 17 for ops whose inputs changed in 18 (Reduce*, Split, Pad).
TORCH_CONVERTIBLE_OPSET = 17


def _downgraded_opset(model, notes: list[str]):
    import onnx
    from onnx import version_converter

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset <= TORCH_CONVERTIBLE_OPSET:
        return model
    try:
        down = version_converter.convert_version(model, TORCH_CONVERTIBLE_OPSET)
        onnx.checker.check_model(down)
    except Exception as e:  # noqa: BLE001 - not every op has a downgrade adapter
        log.info("opset %s -> %s failed: %r", opset, TORCH_CONVERTIBLE_OPSET, e)
        return model
    notes.append(f"converted opset {opset} -> {TORCH_CONVERTIBLE_OPSET} for onnx2torch")
    return down


def widen_half_to_float32(model, notes: list[str]) -> None:
    """A graph that computes in float16/bfloat16 computes in float32 instead: half initializers and
    constants widened (exact), Casts and dtype attributes to half made float32; a half graph input
    is cast to float32 where it enters, a half output cast back where it leaves, so the file keeps
    the upload's interface.

    Why: on the CPU EP, ORT runs a float16 node without a float16 kernel (Conv, Gemm, most others)
    between Casts to and from float (insert_cast_transformer.cc), and a Cast between a
    DequantizeLinear and its op breaks the QDQ node unit: a quantized float16 graph runs no int8
    kernel. ORT's own paths quantize quant_pre_process's output, which is that float graph; this
    gives PT2E the same float32 view."""
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
    out_renames = {o.name: f"{o.name}__float32" for o in g.output
                   if o.type.tensor_type.elem_type in HALF_ELEM_TYPES and o.name not in renames}
    for node in g.node:
        node.output[:] = [out_renames.get(o, o) for o in node.output]
    rename_reads(g, out_renames)
    casts_out = [helper.make_node("Cast", [new], [old], to=o_type, name=f"{old}__to_half")
                 for old, new in out_renames.items()
                 for o_type in [next(o.type.tensor_type.elem_type for o in g.output if o.name == old)]]
    nodes = casts_in + list(g.node) + casts_out
    del g.node[:]
    g.node.extend(nodes)
    notes.append(f"the upload computes in float16: converted as its float32 copy ({count} half tensors, Casts "
                 "and dtype attributes widened, exactly), with the upload's inputs and outputs kept; ORT's CPU "
                 "EP runs such a graph's nodes in float too, and a quantized float16 graph runs no int8 kernel there")


def _widen_graph(g) -> int:
    """Half initializers, Constant values, Cast/dtype attributes and value types of ``g`` and its
    bodies made float32; how many were changed. Graph inputs/outputs of the top graph are left to
    the caller (``widen_half_to_float32``), a body's are widened."""
    from onnx import AttributeProto, TensorProto, numpy_helper

    changed = 0

    def widen_tensor(t) -> bool:
        if t.data_type not in HALF_ELEM_TYPES:
            return False
        wide = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)
        t.CopyFrom(wide)
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
    return changed


def _widen_body(body) -> int:
    from onnx import TensorProto

    for vi in (*body.input, *body.output):
        if vi.type.tensor_type.elem_type in HALF_ELEM_TYPES:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    return _widen_graph(body)


def cleaned_for_torch(model, shapes: dict[str, tuple[int, ...]], *,
                      constants: dict[str, np.ndarray] | None = None,
                      keep_dynamic: dict[str, set[int]] | None = None) -> CleanedModel:
    """A copy of ``model`` made ready for onnx2torch; ``model`` itself is left untouched."""
    import onnx

    work = onnx.ModelProto()
    work.CopyFrom(model)
    notes: list[str] = []
    _drop_initializer_inputs(work, notes)
    baked = _bake_inputs(work, constants or {}, notes)
    _fix_input_shapes(work, shapes, notes, keep_dynamic or {})
    work = _fold_constants(work, notes)
    work = _downgraded_opset(work, notes)
    return CleanedModel(model=work, notes=notes, baked_inputs=baked)


def constant_inputs(calibration: list[dict[str, np.ndarray]], *, max_elements: int = 16) -> dict[str, np.ndarray]:
    """Integer/bool inputs that hold the same small value in every sample (a sample rate, a flag).

    Float inputs are never baked: a float that never varies in calibration is still data.
    """
    if not calibration:
        return {}
    out = {}
    for name, first in calibration[0].items():
        arr = np.asarray(first)
        if arr.dtype.kind not in "iub" or arr.size > max_elements:
            continue
        if all(np.array_equal(np.asarray(f[name]), arr) for f in calibration[1:]):
            out[name] = arr
    return out


def control_flow_nodes(model) -> Counter:
    """If/Loop/Scan in the main graph (what onnx2torch cannot convert)."""
    return Counter(n.op_type for n in model.graph.node if n.op_type in CONTROL_FLOW and n.domain in ("", "ai.onnx"))


# quantize_static writes per-channel DequantizeLinear(axis=...) whatever the opset; `axis` exists
# only from opset 13, so an opset-11/12 file comes out invalid ("Unrecognized attribute: axis").
ORT_QDQ_MIN_OPSET = 13


def opset_for_ort(fp32_path, out_path, *, opset: int | None) -> tuple[object, str | None]:
    """The fp32 file ORT should quantize: upgraded to opset 13 when older; (path, note or None).

    ``opset`` is the file's ai.onnx opset, which the caller already read: a large model is not
    parsed again just to learn it."""
    import onnx
    from onnx import version_converter

    if opset is None or opset >= ORT_QDQ_MIN_OPSET:
        return fp32_path, None
    try:
        model = onnx.load(str(fp32_path))
        up = version_converter.convert_version(model, ORT_QDQ_MIN_OPSET)
        onnx.save(up, str(out_path))
    except Exception as e:  # noqa: BLE001 - quantize the file as it is, and say so
        return fp32_path, f"opset {opset} could not be upgraded to {ORT_QDQ_MIN_OPSET} ({type(e).__name__}); quantized as is"
    return out_path, f"opset {opset} upgraded to {ORT_QDQ_MIN_OPSET} before quantizing (per-channel Q/DQ needs `axis`)"
