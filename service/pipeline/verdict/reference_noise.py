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
# int8 rounding of a well-scaled tensor costs ~40 dB: fp32 rewrites below that cost as much as quantization.
UNSTABLE_DB = 40.0


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
    names = next(([o.reference for o in ol.numerics.outputs] for ol in fp32_levels.values() if ol.numerics), [])
    out = []
    for k, ref in enumerate(reference or []):
        if ref.dtype.kind != "f" or np.isfinite(ref).all():
            continue
        bad = int(ref.size - np.count_nonzero(np.isfinite(ref)))
        name = names[k] if k < len(names) else f"#{k}"
        out.append(Lint(
            code=NONFINITE_CODE, severity="warning", artifact="fp32",
            message=(f"the fp32 model's output '{name}' holds {bad} inf or NaN values of {ref.size} on the evaluation "
                     "samples: a quantized file that holds the same values there agrees with it, so every figure "
                     "on this output describes only its finite positions."),
            hint=("if the samples are generated, they may lie outside the model's domain (a Log or Sqrt of a "
                  "negative value): upload representative inputs as an .npz, or set options.input_values"),
        ))
    return out
