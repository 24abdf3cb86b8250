"""Lints on the quantized files: what a tool wrote into its file, what ONNX Runtime makes of it, and what
its outputs show against fp32's."""

from __future__ import annotations

from service.pipeline.inspect.dropped_activations import DroppedActivation
from service.pipeline.ort.targets import host_platform, int8_allowed_in
from service.pipeline.runtime.numerics import SQNR_FLOOR
from service.pipeline.verdict.lints.registry import Findings, db_text, first_three, lint, size_text
from service.schemas.levels import Lint, OptimizedLevel
from service.schemas.options import resolved_ort_settings
from service.schemas.report import CpuInfo, FileInfo


# What a tool wrote into its file

def _has_qdq(f) -> bool:
    return any(k.rsplit(".", 1)[-1] in ("QuantizeLinear", "DequantizeLinear") for k in f.op_histogram)  # com.microsoft too


def _nothing_quantized(f) -> bool:
    return not f.int8_kernels and not _has_qdq(f)


@lint("nothing_quantized", "warning", "a tool wrote no quantized op into its file, with why")
def nothing_quantized(found: Findings) -> list[Lint]:
    out = []
    for a, f, _ in found.quantized_files():
        if not _nothing_quantized(f):
            continue
        hist = f.op_histogram
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
    return out


@lint("weights_only", "error", "the file dequantizes integer weights but quantizes no activation")
def weights_only(found: Findings) -> list[Lint]:
    return [Lint(
        code="weights_only", severity="error", artifact=a,
        message=f"the file dequantizes {len(f.weights)} integer weight(s) but quantizes no activation (no "
                "QuantizeLinear, no int8 kernel): every op computes in float on the dequantized weights, so "
                "its figures are those of weight rounding, not of static int8.",
        hint="the quantizer calibrated no activation: read tool.notes (pre-processing), and give the "
             "inputs a float type and shape it can follow; ORT's quantize_static skips tensors whose "
             "type ONNX shape inference cannot give",
    ) for a, f, _ in found.quantized_files()
        if not _nothing_quantized(f) and not f.int8_kernels and not f.op_histogram.get("QuantizeLinear") and f.weights]


@lint("per_channel_below_opset_13", "error", "per-channel quantization written below opset 13, where "
      "DequantizeLinear has no axis")
def per_channel_below_opset_13(found: Findings) -> list[Lint]:
    out = []
    for a, f, _ in found.quantized_files():
        per_channel = [w for w in f.weights if w["per_channel"]]
        if per_channel and f.opset < 13:
            out.append(Lint(
                code="per_channel_below_opset_13", severity="error", artifact=a,
                message=f"{len(per_channel)} per-channel weights in a file with opset {f.opset}: the axis "
                        "attribute of QuantizeLinear/DequantizeLinear needs opset 13 or later.",
                hint="export with opset >= 13, or quantize weights per-tensor",
                source="ONNX operator spec: DequantizeLinear-13 adds axis; ORT quantize_static refuses per_channel below 13",
            ))
    return out


@lint("asymmetric_per_channel_conv_weights", "error", "per-channel Conv weights with different zero points per "
      "channel")
def asymmetric_per_channel_conv_weights(found: Findings) -> list[Lint]:
    out = []
    for a, f, _ in found.quantized_files():
        asym = [w for w in f.weights if w["per_channel"] and not w["zero_points_equal"]
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
    return out


@lint("pt2e_scale_floor", "error,warning", "torchao's smallest scale (eps=2**-12) is coarser than some tensors' "
      "ranges (rounded to zero where 'error')")
def pt2e_scale_floor(found: Findings) -> list[Lint]:
    return [x for a, f, _ in found.quantized_files() if a == "pt2e_qdq" for x in _scale_floor_lints(f)]


@lint("qoperator_dropped_activation", "error", "ORT's QOperator quantizer removed a Relu/Clip whose input another "
      "node reads", scope="job", reads=lambda found: (found.inspected.dropped_activations,))
def qoperator_dropped_activation_lints(lost: list[DroppedActivation]) -> list[Lint]:
    """One lint when ORT's QOperator file lost a Relu/Clip whose input another node also reads (found by the
    inspect stage while it holds the graphs: inspect/dropped_activations.py says how)."""
    if not lost:
        return []
    names = [d.name for d in lost]
    shown = ", ".join(f"{d.op_type} '{d.name}' (input '{d.input}')" for d in lost[:3])
    more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
    return [Lint(
        code="qoperator_dropped_activation", severity="error", artifact="ort_qoperator",
        message=(f"ORT's QOperator quantizer removed {shown}{more} although another node also reads that input: it "
                 "kept the input's full range and hands the activation's readers the input's quantized value "
                 "(a float reader its DequantizeLinear), negatives included, so the figures downstream measure that, "
                 "not int8 rounding"),
        hint=(f"keep them in float with options.ort.nodes_to_exclude = {names[:8]}, or deploy the QDQ file "
              "(ort_qdq keeps the activation)"),
        source="onnxruntime/quantization/operators/activation.py (QLinearActivation.QuantizeClipRelu), "
               "base_quantizer.py (adjust_tensor_ranges: only for a Relu/Clip that is its input's only reader)",
    )]


# Below this share of the file, repeated copies are not worth a word.
REPEATED_WEIGHTS_MIN_SHARE = 0.05


@lint("repeated_weights", "warning", "the same weight is stored more than once in a file", scope="job",
      reads=lambda found: ({n: a.file for n, a in found.artifacts.items() if a.file is not None},))
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
        examples = "; ".join(f"{g.copies} x {size_text(g.bytes_each)}: " + " = ".join(g.names)
                             + (" = ..." if g.copies > len(g.names) else "") for g in r.largest[:3])
        stored = ("the upload stores each once" if upload is None
                  else f"the upload's own repeats take {size_text(upload.extra_bytes)}")
        # An ONNX upload's PT2E file is stored with one copy each (own_weights.shared_again): this is
        # a .pt2 program's, or another tool's file.
        why = (" convert_pt2e folds each weight node's quantized value into a constant of its own, so a weight the "
               "program computes once per use (sliced inside a loop, say) becomes one constant per use."
               if name == "pt2e_qdq" else "")
        out.append(Lint(
            code="repeated_weights", severity="warning", artifact=name,
            message=(f"{name} stores {r.extra_copies} extra copies of {r.groups} weight(s), the same dtype, shape and "
                     f"bytes under other names ({examples}): {size_text(r.extra_bytes)}, "
                     f"{r.extra_bytes / info.size:.0%} of the file's {size_text(info.size)}, where {stored}."
                     f"{why} ONNX Runtime keeps every copy in memory too: its ConstantSharing pass shares scalar "
                     "initializers only."
                     + (f" {size_text(r.extra_bytes_from_bias_copies)} of them are the equal zero points and scales ORT "
                        "wrote for quantcompare's per-reader copies of shared biases (tool.notes), not the upload's."
                        if r.extra_bytes_from_bias_copies else "")),
            hint=("compute a shared weight once, outside the loop or module that reuses it; the copies hold equal "
                  "bytes, so pointing every reader of a copy at the first one gives the same outputs from a smaller "
                  "file; ort_qdq quantizes a shared weight once"),
            source="onnxruntime/core/optimizer/constant_sharing.h ('only scalar-valued initializers are handled')",
        ))
    return out


# An int8 step this wide (a range of ~2.5e8) fits no activation a network computes: it is a sentinel
# in the calibration data, an attention mask's float32 minimum (or -1e9) added to padded positions.
SENTINEL_SCALE = 1e6


@lint("sentinel_in_activation_range", "error", "activations calibrated to a huge int8 step: a sentinel value "
      "(a -1e9 mask) widened their range", reads=lambda found: (found.inventories,))
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
        names = first_three([f"'{t.name}' (step {step:.3g})" for step, t in wide])
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


_LISTED = 4


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


@lint("no_quantized_artifact", "error", "no path produced a quantized file", scope="job",
      reads=lambda found: (found.artifacts, found.quantized.already_quantized))
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


@lint("pt2e_ignores_inputs", "warning", "the PT2E file computes as if an input held the one value it held in every "
      "calibration sample", scope="job", reads=lambda found: (found.artifacts.get("pt2e_qdq"),))
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


# What ORT makes of the files

X86 = ("x86_64", "AMD64", "i686", "x86")


def _has_vnni(cpu: CpuInfo) -> bool:
    return any(cpu.isa.get(k) for k in ("avx512_vnni", "avx_vnni", "amx_int8"))


@lint("ort_session_entries", "info", "the job set ORT session config entries (options.ort_session): its ORT "
      "figures hold for sessions that set them too")
def ort_session_entries(found: Findings) -> list[Lint]:
    entries = found.options.ort_session
    if not entries:
        return []
    shown = ", ".join(f"{k}={v}" for k, v in entries.items())
    default = host_platform().int8_allowed
    allowed = int8_allowed_in(entries, default)
    int8 = "" if allowed == default else (
        f" They change ORT's int8 rule on this CPU: its QDQ selectors {'take' if allowed else 'refuse'} int8 "
        f"activations, where its default (QDQIsInt8Allowed()) {'refuses' if allowed else 'takes'} them.")
    return [Lint(
        code="ort_session_entries", severity="info", artifact=None,
        message=f"every session that measured the files on this machine (level graphs, accuracy, latency, profile, "
                f"advice) set {shown}: the rewrites, kernels and figures of the ORT-run files hold for a deployment "
                f"that sets the same entries.{int8}",
        hint="set them on the deployment's SessionOptions (so.add_session_config_entry); run the job without "
             "options.ort_session for ORT's defaults",
        source="onnxruntime/core/optimizer/graph_transformer_utils.cc (GetConfigOrDefault(kOrtSessionOptionsQDQIsInt8Allowed, "
               "QDQIsInt8Allowed() ? \"1\" : \"0\"))",
    )]


@lint("qoperator_int8_activations_x86", "warning", "the QOperator file's int8 activations run ORT's slow s8s8 "
      "kernels on x86")
def qoperator_int8_activations_x86(found: Findings) -> list[Lint]:
    if found.cpu.arch not in X86:
        return []
    return [Lint(
        code="qoperator_int8_activations_x86", severity="warning", artifact=a,
        message="int8 activations in QOperator format on x86-64: ORT's quantize_static warns "
                "'Please use QuantFormat.QDQ for activation type QInt8 and weight type QInt8. Or it "
                "will lead to bad performance on x64.' The QLinear ops in the file run as written "
                "(s8s8 kernels); QDQ files get uint8 activations from QDQS8ToU8Transformer instead.",
        hint="use the QDQ format (ort_qdq), or activation_type uint8 for QOperator on x86",
        source="onnxruntime/python/tools/quantization/quantize.py (check_static_quant_arguments)",
    ) for a, f, _ in found.quantized_files()
        if a == "ort_qoperator" and "int8" in f.activation_dtypes and f.int8_kernels]


@lint("u8s8_saturation_without_vnni", "warning", "u8s8 kernels on a CPU without VNNI can saturate")
def u8s8_saturation_without_vnni(found: Findings) -> list[Lint]:
    # u8s8 on AVX2 without VNNI: vpmaddubsw adds pairs of u8*s8 products into int16 and saturates.
    cpu = found.cpu
    if cpu.arch not in X86 or not cpu.isa.get("avx2") or _has_vnni(cpu):
        return []
    settings = found.quantized.ort_settings if found.quantized else resolved_ort_settings(found.options)  # levels alone
    reduce_range = bool(settings.get("reduce_range"))
    out = []
    for a, f, per_level in found.quantized_files():
        runs_u8 = any(ol.kernel_activation_dtypes.get("uint8") for ol in per_level.values())
        s8_weights = any(w["dtype"] == "int8" for w in f.weights)
        if runs_u8 and s8_weights and not (reduce_range and a.startswith("ort_")):
            out.append(Lint(
                code="u8s8_saturation_without_vnni", severity="warning", artifact=a,
                message="uint8 activations x int8 weights on an x86 CPU with AVX2 but no VNNI: MLAS uses "
                        "vpmaddubsw, whose int16 pair sums can saturate, so results can differ from the "
                        "reference by more than the quantization error.",
                hint="quantize with reduce_range=True (7-bit weights), or run on a CPU with AVX512-VNNI/AVX-VNNI",
                source="ONNX Runtime docs: Quantize ONNX models, 'When and why do I need to try U8U8?' / reduce_range",
            ))
    return out


@lint("no_int8_kernels", "warning", "ORT runs no int8 kernel for this file at any level")
def no_int8_kernels(found: Findings) -> list[Lint]:
    out = []
    for a, f, per_level in found.quantized_files():
        last = next((per_level[lv] for lv in reversed(list(per_level)) if not per_level[lv].error), None)
        nothing_quantized = not f.int8_kernels and not any(
            k.rsplit(".", 1)[-1] in ("QuantizeLinear", "DequantizeLinear") for k in f.op_histogram)
        if last is not None and last.int8_coverage == 0 and not nothing_quantized:
            out.append(Lint(
                code="no_int8_kernels", severity="warning", artifact=a,
                message=f"at level {last.level} none of the {sum(last.compute_ops_float.values())} compute ops runs in an int8 "
                        "kernel: the file is quantized but ORT computes in float between Q/DQ pairs.",
                hint="check the quantizer's annotations and ORT's fusion conditions (activation dtype, "
                     "per-channel zero points, opset); see the diff at level extended",
            ))
    return out


@lint("level_failed", "error", "ORT could not run a file at some level")
def level_failed(found: Findings) -> list[Lint]:
    out = []
    for a, _, per_level in found.quantized_files():
        failed = [lv for lv, ol in per_level.items() if ol.error]
        if failed:
            out.append(Lint(
                code="level_failed", severity="error", artifact=a,
                message=f"ORT failed at level(s) {', '.join(failed)}: {per_level[failed[0]].error}",
                hint="open the file at the last level that worked and compare; report the failing level upstream",
            ))
    return out


# What the outputs show

def _each(found: Findings, lints_of) -> list[Lint]:
    return [x for a, _, per_level in found.quantized_files() for x in lints_of(a, per_level)]


@lint("data_dependent_outputs", "warning,info", "outputs whose shape follows the values are compared by shape only")
def data_dependent_outputs(found: Findings) -> list[Lint]:
    return _each(found, _data_dependent_lints)


@lint("nonfinite_outputs", "error", "a quantized file outputs NaN or inf where fp32 does not")
def nonfinite_outputs(found: Findings) -> list[Lint]:
    return _each(found, _nonfinite_lints)


@lint("collapsed_output", "warning", "a quantized output is one value everywhere while fp32's varies")
def collapsed_output(found: Findings) -> list[Lint]:
    return _each(found, _collapsed_output_lints)


@lint("integer_outputs_differ", "warning", "integer outputs (ids, counts) differ from fp32's")
def integer_outputs_differ(found: Findings) -> list[Lint]:
    return _each(found, _integer_output_lints)


@lint("circular_outputs", "info", "outputs that hold angles are judged by their angular error, not SQNR (a wrap is "
      "no error of 2 pi)")
def circular_outputs(found: Findings) -> list[Lint]:
    return [x for x in _each(found, _unjudged_output_lints) if x.code == "circular_outputs"]


@lint("saturated_outputs", "info", "saturated classifier outputs are judged by argmax agreement, not SQNR")
def saturated_outputs(found: Findings) -> list[Lint]:
    return [x for x in _each(found, _unjudged_output_lints) if x.code == "saturated_outputs"]


@lint("unmeasured_outputs", "warning", "outputs with no accuracy figure (the same on every sample, or drawn from "
      "unseeded random ops)")
def unmeasured_outputs(found: Findings) -> list[Lint]:
    return [x for x in _each(found, _unjudged_output_lints) if x.code == "unmeasured_outputs"]


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
            shown = "; ".join(f"{o.name!r}: {figure(o)}, SQNR {db_text(o.sqnr_db)} ({o.kind_detail})" for o in judged)
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
