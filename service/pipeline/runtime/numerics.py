"""Numbers that compare two runs of a model: SQNR, cosine, max abs error, drift in quantization steps.

Outputs are matched by position: an exported quantized model renames its outputs
(``relu`` in fp32 is ``dequantize_per_tensor_1`` after PT2E), but keeps their order.
"""

from __future__ import annotations

import math

import numpy as np

from service.pipeline.runtime.output_kinds import angular_errors, argmax_agreement, output_kind
from service.schemas.levels import LevelNumerics, OutputNumerics

# An SQNR for a zero reference with nonzero error has no meaning; report it as very low. The same
# floor stands for an output that is inf or NaN where fp32 has a number (a quantized energy of 0
# before a Log): a figure that fails every SQNR gate.
SQNR_FLOOR = -200.0


def finite_pairs(reference: np.ndarray, actual: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Both flattened, without the positions where they hold the same non-finite value (both -inf,
    both NaN: they agree), and how many positions hold a non-finite value the other does not match.
    Only called once a sum came out non-finite: finite outputs pay for no mask."""
    r, a = np.ravel(reference), np.ravel(actual)
    both = np.isfinite(r) & np.isfinite(a)
    same = (r == a) | (np.isnan(r) & np.isnan(a))
    return r[both], a[both], int(np.count_nonzero(~both & ~same))


def nonfinite_mismatches(reference: np.ndarray, actual: np.ndarray) -> int:
    """Positions where ``actual`` is inf or NaN and ``reference`` does not hold the same value (or the
    other way round); 0 for integer outputs."""
    if reference.dtype.kind != "f" or (np.isfinite(reference).all() and np.isfinite(actual).all()):
        return 0
    return finite_pairs(reference, actual)[2]


def sqnr_from_sums(signal: float, noise: float) -> float | None:
    """10*log10(signal / noise) from the two power sums; ``None`` when the noise is exactly zero."""
    if noise == 0.0:
        return None
    if signal == 0.0 or signal / noise == 0.0:  # the ratio underflows: no logarithm, far below any gate
        return SQNR_FLOOR
    return max(SQNR_FLOOR, 10.0 * math.log10(signal / noise))


BOOTSTRAP_RESAMPLES = 1000


def sqnr_intervals_from_sums(signal: np.ndarray, noise: np.ndarray, *, resamples: int = BOOTSTRAP_RESAMPLES,
                             seed: int = 0, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap interval of ``sqnr_from_sums(signal.sum(0), noise.sum(0))`` per column.

    ``signal`` and ``noise`` are (samples, figures): each figure's power sums per evaluation sample.
    A resample draws the samples with replacement (every figure the same draw, from one seeded
    generator: the intervals are reproducible) and sums them again, as the figure itself sums all
    samples. The bounds are order statistics of the resampled SQNRs; +inf where a resample holds no
    noise at all, floored at SQNR_FLOOR like the figure.
    """
    n = signal.shape[0]
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(np.float64)  # (resamples, n)
    low_rank = int(np.floor((1 - level) / 2 * resamples))
    high_rank = min(resamples - 1, int(np.ceil((1 + level) / 2 * resamples)) - 1)
    lows, highs = np.empty(signal.shape[1]), np.empty(signal.shape[1])
    for start in range(0, signal.shape[1], 512):  # (resamples x 512) at a time: a 2000-row table stays small
        cols = slice(start, start + 512)
        sig, err = counts @ signal[:, cols], counts @ noise[:, cols]
        with np.errstate(divide="ignore", invalid="ignore"):
            db = np.where(err == 0, np.inf, 10.0 * np.log10(sig / err))
        db = np.sort(np.maximum(np.nan_to_num(db, nan=SQNR_FLOOR, posinf=np.inf, neginf=SQNR_FLOOR), SQNR_FLOOR), axis=0)
        lows[cols], highs[cols] = db[low_rank], db[high_rank]
    return lows, highs


def sqnr_db(reference: np.ndarray, actual: np.ndarray) -> float | None:
    """10*log10(signal power / noise power); ``None`` when the two are identical (infinite)."""
    ref = reference.astype(np.float64, copy=False).ravel()
    act = actual.astype(np.float64, copy=False).ravel()
    noise = ref - act
    n = float(np.dot(noise, noise))
    s = float(np.dot(ref, ref))
    if not (math.isfinite(n) and math.isfinite(s)):
        ref, act, mismatched = finite_pairs(ref, act)
        if mismatched:
            return SQNR_FLOOR
        noise = ref - act
        n, s = float(np.dot(noise, noise)), float(np.dot(ref, ref))
    return sqnr_from_sums(s, n)


def cosine(reference: np.ndarray, actual: np.ndarray) -> float:
    a = reference.astype(np.float64, copy=False).ravel()
    b = actual.astype(np.float64, copy=False).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if not (math.isfinite(na) and math.isfinite(nb)):
        a, b, mismatched = finite_pairs(a, b)
        if mismatched:
            return 0.0
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def max_abs_error(reference: np.ndarray, actual: np.ndarray) -> float:
    """Over the positions where both are finite (a report holds no inf): ``nonfinite_mismatches``
    counts the others."""
    if reference.size == 0:
        return 0.0
    diff = float(np.max(np.abs(reference.astype(np.float64) - actual.astype(np.float64))))
    if math.isfinite(diff):
        return diff
    r, a, _ = finite_pairs(reference, actual)
    return float(np.max(np.abs(r.astype(np.float64) - a.astype(np.float64)))) if r.size else 0.0


def as_tensor(value) -> np.ndarray:
    """One ORT output as an array. Tensors are as they are. A ZipMap output (scikit-learn exports:
    a list of ``{class: probability}`` per row, a sequence of maps) is the ``[rows, classes]``
    probabilities in the order ZipMap wrote the classes, which is what it was made from; a sequence
    of same-shape tensors is stacked. Anything else has no element-wise comparison: ValueError."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, dict):
        return np.asarray(list(value.values()), dtype=np.float32)
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            classes = list(value[0])
            if all(list(v) == classes for v in value):
                return np.asarray([[v[c] for c in classes] for v in value], dtype=np.float32)
        elif all(isinstance(v, np.ndarray) for v in value) and len({v.shape for v in value}) <= 1:
            return np.stack(value) if value else np.zeros((0,), np.float32)
    raise ValueError(f"an output of type {type(value).__name__} that is not a tensor, a ZipMap or a sequence of "
                     "same-shape tensors has no element-wise comparison")


def concat_runs(runs: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Per output: every eval sample's result, concatenated along axis 0 (or stacked for scalars).
    An output whose length moves from sample to sample on one other axis (a detector's [1, boxes, 6]
    after NonMaxSuppression) is concatenated along that axis ([1, all boxes, 6]); one that moves on
    more is every sample's values flattened, in sample order."""
    if not runs:
        return []
    out = []
    for k in range(len(runs[0])):
        parts = [as_tensor(r[k]) for r in runs]
        if not parts[0].ndim:
            out.append(np.stack(parts))
            continue
        same_rank = len({p.ndim for p in parts}) == 1
        moving = {i for p in parts for i, (a, b) in enumerate(zip(p.shape, parts[0].shape)) if a != b}
        if same_rank and len(moving) <= 1:  # samples on axis 0, or on the one axis whose length moves
            out.append(np.concatenate(parts, axis=moving.pop() if moving else 0))
        else:
            out.append(np.concatenate([p.ravel() for p in parts]))
    return out


def compared_exactly(reference: np.ndarray) -> bool:
    """An integer, bool or string output (a class label, a TopK index, a count, a mask) is right or
    wrong: the distance between two class indices is no error signal, so it gets no SQNR."""
    return reference.dtype.kind not in "fc"


def collapsed_to(reference: np.ndarray, actual: np.ndarray) -> float | None:
    """The single finite value ``actual`` holds everywhere, when ``reference`` holds more than one."""
    if actual.size < 2 or not np.all(np.isfinite(actual)):
        return None
    first = actual.flat[0]
    if not np.all(actual == first) or np.all(reference == reference.flat[0]):
        return None
    return float(first)


def mismatch_share(reference: np.ndarray, actual: np.ndarray) -> float:
    """Share of the elements of an exactly compared output that differ from the reference."""
    return float(np.mean(reference != actual)) if reference.size else 0.0


def worst_elementwise_sqnr(reference: list[np.ndarray], actual: list[np.ndarray],
                           data_dependent=frozenset()) -> float | None:
    """The worst SQNR over the float outputs compared element-wise, as ``level_numerics`` takes it (not
    the ``data_dependent`` positions: rows a selection kept; not integer outputs, compared exactly);
    None when every one is exact or none is compared."""
    values = [sqnr_db(r, a) for k, (r, a) in enumerate(zip(reference, actual))
              if k not in data_dependent and r.shape == a.shape and not compared_exactly(r)]
    finite = [v for v in values if v is not None]
    return min(finite) if finite else None


def level_numerics(reference: list[np.ndarray], reference_names: list[str], actual: list[np.ndarray],
                   names: list[str], *, steps: list[float | None], previous: list[np.ndarray] | None,
                   samples: int, data_dependent: dict[int, str] | None = None,
                   drawn: dict[int, str] | None = None) -> LevelNumerics:
    """``data_dependent``: output position -> why its shape depends on the values computed
    (``output_shapes.tensors_after_selection``); those outputs are compared by shape only. ``drawn``:
    output position -> the unseeded random op it depends on (``output_kinds.outputs_after_random_draws``):
    compared, but not measured. Outputs SQNR cannot judge get the figure that fits (output_kinds.py)."""
    if len(reference) != len(actual):
        raise ValueError(f"{len(actual)} outputs where the fp32 model has {len(reference)}")
    data_dependent, drawn = data_dependent or {}, drawn or {}
    outs = []
    for k, (ref, got) in enumerate(zip(reference, actual)):
        if k in data_dependent:
            outs.append(OutputNumerics(
                name=names[k], reference=reference_names[k], compared="shape", data_dependent=data_dependent[k],
                shape=list(got.shape), reference_shape=list(ref.shape), sqnr_db=None, cosine=None,
                max_abs_error=None, output_step=steps[k], judged_by=None,
                not_measured=f"compared by shape only: {data_dependent[k]}"))
            continue
        if ref.shape != got.shape:
            raise ValueError(f"output {names[k]!r} has shape {list(got.shape)}, fp32 has {list(ref.shape)}")
        if compared_exactly(ref):
            numeric = ref.dtype.kind in "iub"
            outs.append(OutputNumerics(
                name=names[k], reference=reference_names[k], compared="exact", sqnr_db=None, cosine=None,
                max_abs_error=max_abs_error(ref, got) if numeric else None, mismatch_share=mismatch_share(ref, got),
                drift_max_abs=max_abs_error(previous[k], got) if numeric and previous is not None else None,
                judged_by="mismatch_share" if k not in drawn else None,
                not_measured=_drawn_reason(drawn[k]) if k in drawn else None))
            continue
        drift = drift_steps = None
        if previous is not None:
            drift = max_abs_error(previous[k], got)
            if steps[k]:
                drift_steps = drift / steps[k]
        outs.append(OutputNumerics(
            name=names[k], reference=reference_names[k], sqnr_db=sqnr_db(ref, got), cosine=cosine(ref, got),
            max_abs_error=max_abs_error(ref, got), nonfinite=nonfinite_mismatches(ref, got), output_step=steps[k],
            constant_value=collapsed_to(ref, got), drift_max_abs=drift, drift_steps=drift_steps,
            **_judged(ref, got, samples, drawn.get(k)),
        ))
    compared = [o for o in outs if o.judged_by == "sqnr"]
    exact = [o for o in outs if o.compared == "exact"]
    finite = [o.sqnr_db for o in compared if o.sqnr_db is not None]
    unmeasured = sum(o.judged_by is None for o in outs)
    return LevelNumerics(
        outputs=outs,
        worst_sqnr_db=min(finite) if finite else None,
        worst_cosine=min((o.cosine for o in compared), default=1.0 if compared or not outs else None),
        worst_max_abs_error=max((o.max_abs_error for o in compared), default=0.0 if compared or not outs else None),
        elementwise_outputs=len(compared),
        worst_mismatch_share=max((o.mismatch_share for o in exact if o.judged_by), default=None),
        exact_outputs=sum(o.judged_by == "mismatch_share" for o in exact),
        samples=samples,
        worst_angular_error=max((o.angular_error_mean for o in outs if o.judged_by == "angular_error"), default=None),
        worst_argmax_agreement=min((o.argmax_agreement for o in outs if o.argmax_agreement is not None), default=None),
        not_measured_outputs=unmeasured,
        accuracy="measured" if not unmeasured else "not measured" if unmeasured == len(outs) else "partly measured",
    )


def _drawn_reason(why: str) -> str:
    return (f"{why}: this file draws other random numbers than fp32 (ORT seeds each random op with its node "
            "index), so any figure compares two draws, not int8 rounding")


def _judged(ref: np.ndarray, got: np.ndarray, samples: int, drawn: str | None) -> dict:
    """The OutputNumerics fields that say what judges a float output, and its figure when SQNR does not."""
    if drawn is not None:
        return {"judged_by": None, "not_measured": _drawn_reason(drawn)}
    kind, detail = output_kind(ref, samples)
    fields: dict = {"kind": kind, "kind_detail": detail, "argmax_agreement": argmax_agreement(ref, got)}
    if kind == "near_constant":
        return {**fields, "judged_by": None,
                "not_measured": f"{detail}: a figure over one point says nothing of other inputs; samples that move "
                                "it (an uploaded .npz) measure it"}
    if kind == "circular":
        worst, mean = angular_errors(ref, got)
        return {**fields, "judged_by": "angular_error", "angular_error_max": worst, "angular_error_mean": mean}
    if kind == "saturated":
        return {**fields, "judged_by": "argmax_agreement"}
    return fields

