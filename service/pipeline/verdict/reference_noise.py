"""When fp32 itself does not hold still: ORT's float rewrites move an output as much as quantization.

Every SQNR in the report is against fp32 as written (its first level). When fp32 at a later level
is itself far from that reference on an output, the output is ill-conditioned on these samples: a
detector's probability map that is ~0 everywhere (PP-OCRv3's text detector on a random image: max
3e-08, fp32 ``basic`` 7 dB from ``disable_all``), a difference of two nearly equal tensors, a
saturated head. Every quantized SQNR of that output then compares rounding noise. Measured, not
guessed: the fp32 rows of the levels table are the evidence and the lint quotes them.
"""

from __future__ import annotations

import numpy as np

from service.schemas.levels import Lint, OptimizedLevel

CODE = "fp32_output_unstable_across_levels"
NONFINITE_CODE = "fp32_output_nonfinite"
SATURATED_CODE = "fp32_output_saturated"
# An output that takes at most this many distinct values on every evaluation sample (a softmax or
# sigmoid pushed to exactly 0 and 1) has no rounding to measure, only flips.
SATURATED_VALUES = 2
SATURATED_SHARE = 0.99  # or one value at this share of the elements
# int8 rounding of a well-scaled tensor costs ~40 dB: fp32 rewrites below that cost as much as quantization.
UNSTABLE_DB = 40.0


def _float_outputs(fp32_levels: dict[str, OptimizedLevel], reference: list[np.ndarray] | None):
    """(name, values) of each float fp32 output on the evaluation samples, in the model's output order."""
    names = next(([o.reference for o in ol.numerics.outputs] for ol in fp32_levels.values() if ol.numerics), [])
    for k, ref in enumerate(reference or []):
        if ref.dtype.kind == "f":
            yield (names[k] if k < len(names) else f"#{k}"), ref


def unstable_reference_lints(fp32_levels: dict[str, OptimizedLevel],
                             reference: list[np.ndarray] | None) -> list[Lint]:
    """One lint per fp32 output that some level of fp32 moves by less than ``UNSTABLE_DB`` of SQNR."""
    worst: dict[int, tuple[float, str, str]] = {}  # output index -> (sqnr, level, name)
    for level, ol in fp32_levels.items():
        for k, o in enumerate(ol.numerics.outputs if ol.numerics else []):
            if o.sqnr_db is not None and o.sqnr_db < UNSTABLE_DB and (k not in worst or o.sqnr_db < worst[k][0]):
                worst[k] = (o.sqnr_db, level, o.name)
    out = []
    for k, (sqnr, level, name) in sorted(worst.items()):
        ref = reference[k] if reference is not None and k < len(reference) else None
        largest = (f" (largest |value| on the evaluation samples: {float(np.abs(ref).max()):.3g})"
                   if ref is not None and ref.size and ref.dtype.kind == "f" else "")
        kernels = fp32_levels[level].int8_kernels
        if kernels:  # an upload quantized already: ORT fuses its Q/DQ into int8 kernels from extended on
            shown = ", ".join(f"{op} x{n}" for op, n in sorted(kernels.items(), key=lambda kv: -kv[1])[:3])
            out.append(Lint(
                code=CODE, severity="info", artifact="fp32",
                message=(f"the upload is quantized already, and at level {level} ORT runs its Q/DQ as int8 kernels "
                         f"({shown}): {sqnr:.1f} dB from the file as written on output '{name}'{largest} is what "
                         "their integer arithmetic and requantization cost against the float simulation of the "
                         "earlier levels, not noise of the samples."),
                hint=("to measure the quantization itself, upload the float model it was quantized from; this "
                      "job compares the quantized file with itself"),
            ))
            continue
        out.append(Lint(
            code=CODE, severity="warning", artifact="fp32",
            message=(f"fp32 at level {level} is only {sqnr:.1f} dB from fp32 as written on output '{name}'{largest}: "
                     "ORT's float rewrites alone move this output about as much as int8 rounding would, so the "
                     "quantized files' SQNR on it compares noise, not quantization."),
            hint=("the evaluation samples may not exercise the model (a detector shown no object, a saturated "
                  "output): upload representative inputs as an .npz, and read max_abs_error in the output's own units"),
        ))
    return out


def nonfinite_reference_lints(fp32_levels: dict[str, OptimizedLevel],
                              reference: list[np.ndarray] | None) -> list[Lint]:
    """One lint per fp32 output that holds inf or NaN on the evaluation samples: a quantized file that
    matches them there agrees, so its SQNR covers only the finite rest, and generated samples may lie
    outside the model's domain (a Log of a negative value)."""
    out = []
    for name, ref in _float_outputs(fp32_levels, reference):
        if np.isfinite(ref).all():
            continue
        bad = int(ref.size - np.count_nonzero(np.isfinite(ref)))
        out.append(Lint(
            code=NONFINITE_CODE, severity="warning", artifact="fp32",
            message=(f"the fp32 model's output '{name}' holds {bad} inf or NaN values of {ref.size} on the evaluation "
                     "samples: a quantized file that holds the same values there agrees with it, so every figure "
                     "on this output describes only its finite positions."),
            hint=("if the samples are generated, they may lie outside the model's domain (a Log or Sqrt of a "
                  "negative value): upload representative inputs as an .npz, or set options.input_values"),
        ))
    return out


def saturated_reference_lints(fp32_levels: dict[str, OptimizedLevel],
                              reference: list[np.ndarray] | None) -> list[Lint]:
    """One lint per float fp32 output that holds at most ``SATURATED_VALUES`` distinct values on the
    evaluation samples (a captcha reader's five softmax heads, exactly one-hot on normal(0, 1) images:
    fp32 341 dB against itself, PT2E 234-868 dB, ORT 48 dB, figures of nothing)."""
    out = []
    for name, ref in _float_outputs(fp32_levels, reference):
        if ref.size <= 2 * SATURATED_VALUES or not np.isfinite(ref).all():
            continue
        scale = float(np.abs(ref).max())
        # equal to a millionth of the largest value: a softmax's 0.0 and 5.8e-28 are one value
        values, counts = (np.unique(np.round(ref.astype(np.float64) / scale, 6), return_counts=True) if scale
                          else (np.zeros(1), np.array([ref.size])))
        values = values * scale
        if values.size <= SATURATED_VALUES:
            shown = ", ".join(f"{float(v):.3g}" for v in values)
            what = (f"holds only {values.size} distinct value(s) ({shown}) in its {ref.size} elements on the "
                    "evaluation samples: saturated (a softmax or sigmoid pushed to 0 and 1) or thresholded, so a "
                    "quantized file either matches it exactly or flips an element, and its SQNR on this output "
                    "counts flips, not rounding.")
        elif counts.max() >= SATURATED_SHARE * ref.size:
            top = int(counts.argmax())
            what = (f"holds one value ({float(values[top]):.3g}) at {counts[top] / ref.size:.1%} of its {ref.size} "
                    "elements on the evaluation samples (PP-OCRv4's probability map on generated images: 99.4% at 0): "
                    "its SQNR is decided by the few elements elsewhere, and says little about the rest.")
        else:
            continue
        out.append(Lint(
            code=SATURATED_CODE, severity="warning", artifact="fp32",
            message=f"the fp32 model's output '{name}' {what}",
            hint=("if the samples are generated, they may not look like the model's inputs (an image in [0, 1] "
                  "drawn normal(0, 1)): set options.input_values (e.g. {\"low\": 0, \"high\": 1}) or upload an "
                  ".npz; read the outputs before the saturating op in the per-tensor table"),
        ))
    return out
