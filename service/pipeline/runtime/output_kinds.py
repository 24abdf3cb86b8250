"""Outputs SQNR cannot judge, and the figure that fits each (issue 42).

SQNR compares noise power with signal power element by element. Four kinds of float output defeat it:

- circular: an angle (a phase from Atan2, a heading) wraps around: a quantized -3.13 where fp32 says
  3.13 is 0.02 rad off, and 6.26 to SQNR (4-5 dB on a model that is fine). Found from fp32's values:
  every one in [-pi, pi] (or [0, 2 pi]) and spanning at least 3/4 of the circle. Judged by the angular
  error, the difference wrapped into [-pi, pi), in radians.
- near-constant: fp32's output takes the same values on every eval sample (a classifier saturated on
  generated inputs: 100 dB), so a figure over it measures one point, not how quantization does across
  inputs. Not measured: the samples have to move it.
- saturated classifier: probabilities along the last axis (rows in [0, 1] summing to 1) whose rows are
  one-hot: SQNR counts flips of the winning class as huge errors and the rest as none. Judged by the
  share of rows whose argmax agrees with fp32's (argmax agreement).
- drawn: the output depends on a random op without a seed attribute; the quantized file places the op
  at another node index, so ORT draws other numbers (lint ``random_ops``), and the figure measures two
  draws. Not measured.

The kinds come from fp32's outputs alone (the same for every artifact and level); the figures from each
file's outputs. Thresholds are constants here, documented in docs/CONTRACTS.md.
"""

from __future__ import annotations

import math

import numpy as np

from service.pipeline.vocabulary import RANDOM_OPS, all_nodes, is_onnx_domain, node_reads, subgraphs

__all__ = ["CIRCLE_SPAN", "NEAR_CONSTANT_REL", "angular_errors", "argmax_agreement", "artifact_accuracy",
           "output_kind", "outputs_after_random_draws"]

# An angle output: every fp32 value within [-pi, pi] or [0, 2 pi] (this much slack for float rounding)...
CIRCLE_SLACK = 1e-3
# ...and its values spread over at least this much of the circle (tanh, sigmoid and the like never do).
CIRCLE_SPAN = 1.5 * math.pi
# Near-constant: over the eval samples, no element of fp32's output moves by more than this share of the
# output's largest magnitude.
NEAR_CONSTANT_REL = 1e-3
# Probabilities: every value in [0, 1] and each row (last axis) summing to 1 within this.
PROBABILITY_SUM_TOL = 1e-3
# A saturated row: its largest probability at least this; a saturated output: this share of its rows.
SATURATED_MAX = 0.999
SATURATED_ROWS = 0.99


def _is_probabilities(ref: np.ndarray) -> bool:
    if ref.ndim < 1 or ref.shape[-1] < 2 or not ref.size:
        return False
    if ref.min() < -1e-6 or ref.max() > 1 + 1e-6:
        return False
    return bool(np.all(np.abs(ref.sum(axis=-1, dtype=np.float64) - 1.0) <= PROBABILITY_SUM_TOL))


def _circle(ref: np.ndarray) -> str | None:
    """'[-pi, pi]' or '[0, 2 pi]' when fp32's values are angles by the rule above."""
    lo, hi = float(ref.min()), float(ref.max())
    if hi - lo < CIRCLE_SPAN:
        return None
    if lo >= -math.pi - CIRCLE_SLACK and hi <= math.pi + CIRCLE_SLACK:
        return "[-pi, pi]"
    if lo >= -CIRCLE_SLACK and hi <= 2 * math.pi + CIRCLE_SLACK:
        return "[0, 2 pi]"
    return None


def output_kind(ref: np.ndarray, samples: int) -> tuple[str | None, str | None]:
    """(kind, what was seen) of one fp32 output (every eval sample concatenated along axis 0): "circular",
    "near_constant", "saturated" or None (SQNR judges it)."""
    if ref.dtype.kind != "f" or not ref.size or not np.all(np.isfinite(ref)):
        return None, None
    ref = ref.astype(np.float64, copy=False)
    if samples >= 2 and ref.ndim >= 1 and ref.shape[0] % samples == 0:
        per = ref.reshape(samples, -1)
        spread, scale = float(np.max(per.max(axis=0) - per.min(axis=0))), float(np.max(np.abs(per)))
        if spread <= NEAR_CONSTANT_REL * scale or scale == 0.0:
            return "near_constant", (f"fp32's output is the same on all {samples} eval samples (its elements move by "
                                     f"at most {spread:.3g}, its largest magnitude is {scale:.3g})")
    circle = _circle(ref)
    if circle is not None:
        return "circular", (f"fp32's values lie in {circle} and span {float(ref.max() - ref.min()):.3f} rad: an "
                            "angle, which wraps around")
    if _is_probabilities(ref):
        rows = ref.reshape(-1, ref.shape[-1])
        share = float(np.mean(rows.max(axis=1) >= SATURATED_MAX))
        if share >= SATURATED_ROWS:
            return "saturated", (f"probabilities along the last axis ({ref.shape[-1]} classes) whose top class holds "
                                 f">= {SATURATED_MAX} in {share:.0%} of {rows.shape[0]} rows")
    return None, None


def angular_errors(ref: np.ndarray, got: np.ndarray) -> tuple[float, float]:
    """(largest, mean) |got - ref| wrapped into [-pi, pi), in radians."""
    d = got.astype(np.float64).ravel() - ref.astype(np.float64).ravel()
    wrapped = np.abs(np.remainder(d + math.pi, 2 * math.pi) - math.pi)
    return (float(wrapped.max()), float(wrapped.mean())) if wrapped.size else (0.0, 0.0)


def argmax_agreement(ref: np.ndarray, got: np.ndarray) -> float | None:
    """Share of rows (over the last axis) whose largest element is at the same index in both; None for an
    output that is not probabilities along its last axis."""
    if not _is_probabilities(ref.astype(np.float64, copy=False)) or got.shape != ref.shape:
        return None
    a, b = ref.reshape(-1, ref.shape[-1]), got.reshape(-1, got.shape[-1])
    return float(np.mean(a.argmax(axis=1) == b.argmax(axis=1)))


def outputs_after_random_draws(model) -> dict[int, str]:
    """Graph output position -> why, for the outputs a random op without a seed attribute reaches (in the
    main graph, or inside the If/Loop/Scan body of a node upstream)."""
    graph = model.graph

    def unseeded(n) -> bool:
        return (n.op_type in RANDOM_OPS and is_onnx_domain(n.domain)
                and not any(a.name == "seed" for a in n.attribute))

    why: dict[str, str] = {}
    for n in graph.node:  # graph order: a node's inputs are written before it
        inner = next((m for body in subgraphs(n) for m in all_nodes(body) if unseeded(m)), None)
        src = n if unseeded(n) else inner
        reason = (f"downstream of {src.op_type} {src.name or src.output[0]!r}, which has no seed attribute"
                  if src is not None else next((why[i] for i in node_reads(n) if i in why), None))
        if reason:
            why.update({o: reason for o in n.output if o})
    return {k: why[o.name] for k, o in enumerate(graph.output) if o.name in why}


def artifact_accuracy(optimized: dict) -> tuple[str | None, str | None]:
    """(``LevelNumerics.accuracy`` of the highest level with numerics, which outputs have no figure and why)."""
    numerics = next((ol.numerics for ol in reversed(list(optimized.values())) if ol.numerics is not None), None)
    if numerics is None:
        return None, None
    missing = [f"{o.name!r}: {o.not_measured}" for o in numerics.outputs if o.judged_by is None]
    if not missing:
        return numerics.accuracy, None
    what = "no output has an accuracy figure" if numerics.accuracy == "not measured" else \
        f"{len(missing)} of {len(numerics.outputs)} outputs have no accuracy figure"
    return numerics.accuracy, f"{what}: " + "; ".join(missing)
