"""One set of calibration and evaluation samples, shared by every path of a job.

A sample is one feed: ``{input_name: array with the input's full resolved shape}``. Generated
samples are seeded (calibration from ``seed``, evaluation from ``seed + 1``, so evaluation is
held out); uploaded ``.npz`` files have one array per input with the samples on the leading axis.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from service.errors import InvalidCalibration, InvalidOptions
from service.schemas.options import ComparisonOptions
from service.pipeline.inputs.specs import InputSpec
from service.schemas.report import SamplesInfo

Feed = dict[str, np.ndarray]

_FLOATS = {"float32", "float16", "float64"}
_INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
# attention_mask, input_mask, src_mask, padding_mask: not masked_lm_positions.
_MASK_NAME = re.compile(r"(?:^|[^a-z])masks?(?:$|[^a-z])|attentionmask")


@dataclass(frozen=True)
class Samples:
    calibration: list[Feed]
    evaluation: list[Feed]
    info: SamplesInfo
    # More held-out feeds after ``evaluation``, one at a time, for a figure that needs more samples than
    # eval_samples (the per-tensor table's intervals): generated, the seed+1 stream goes on (its first
    # eval_samples are ``evaluation``); uploaded, the file's held-out samples ``evaluation`` left.
    more_evaluation: Callable[[], Iterator[Feed]] | None = None


def _check_values_fit(name: str, iv, dtype: np.dtype) -> None:
    """options.input_values[name] in the input's dtype: a value past its range would be drawn as inf
    (floats), wrap or make numpy raise (integers), instead of the values the user asked for."""
    if iv is None or dtype.kind not in "fiu":
        return
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    top = float(info.max) + (1 if dtype.kind in "iu" else 0)  # an integer range's high is exclusive: [0, 256) fits uint8
    problems = [f"{key} {value:g} is outside it" for key, value in (("low", iv.low), ("high", iv.high),
                                                                   ("constant", iv.constant))
                if value is not None and not float(info.min) <= value <= (top if key == "high" else float(info.max))]
    if not problems and iv.low is not None:
        if dtype.kind == "f" and not math.isfinite(iv.high - iv.low):
            problems.append(f"the range [{iv.low:g}, {iv.high:g}) is wider than a float64 can span")
        if dtype.kind in "iu" and int(iv.high) <= int(iv.low):
            problems.append(f"the range [{int(iv.low)}, {int(iv.high)}) holds no whole number")
    if problems:
        raise InvalidOptions(
            f"input_values[{name!r}] does not fit the input, which is {dtype} (values {info.min:g} to {info.max:g}): "
            + "; ".join(problems),
            hint=f"give values its type ({dtype}) can hold: the range its real inputs take (high is exclusive), or a constant",
        )


def _generator_for(spec: InputSpec, options: ComparisonOptions, model_range=None) -> tuple[str, callable]:
    iv = options.input_values.get(spec.name)
    dtype = np.dtype(spec.dtype)  # specs.FEEDABLE_DTYPES: numpy dtypes only
    _check_values_fit(spec.name, iv, dtype)
    if iv is None and model_range is not None:  # the model states the range; the option still wins
        return f"{model_range.description}: {model_range.why}", model_range.make
    if iv is not None and iv.constant is not None:
        return f"constant {iv.constant:g}", lambda rng, shape: np.full(shape, iv.constant, dtype=dtype)
    if spec.dtype in _FLOATS:
        if iv is not None and iv.low is not None and iv.high is not None:
            return (f"uniform [{iv.low:g}, {iv.high:g})",
                    lambda rng, shape: rng.uniform(iv.low, iv.high, size=shape).astype(dtype))
        return "normal(0, 1)", lambda rng, shape: rng.standard_normal(shape).astype(dtype)
    if spec.dtype == "bool":
        if iv is None and _MASK_NAME.search(spec.name.lower()):
            # A bool mask drawn at random masks whole rows out (every key of a query: a softmax of
            # -inf is NaN, and the quantizers then calibrate NaN). torch's key_padding_mask marks
            # padding with True; other masks (attention_mask, src_mask) mark what is attended.
            attend = "padding" not in spec.name.lower()
            return ((f"constant {attend}: a bool mask by its name, "
                     + ("every position attended" if attend else "no position padded (True marks padding)")
                     + " (unpadded input; set options.input_values or upload an .npz for padded batches)"),
                    lambda rng, shape: np.full(shape, attend, dtype=bool))
        return "bernoulli(0.5)", lambda rng, shape: rng.random(shape) < 0.5
    if spec.dtype in _INTS:
        if iv is None and _MASK_NAME.search(spec.name.lower()):
            # A transformer's integer attention mask: 1 attends, 0 pads (Hugging Face tokenizers, and
            # optimum's dummy inputs). Random 0/1 would pad whole rows of a short sequence (NaN in softmax).
            return ("constant 1: an integer mask by its name, every position attended (unpadded text; "
                    "set options.input_values or upload an .npz for padded batches)",
                    lambda rng, shape: np.ones(shape, dtype=dtype))
        if iv is None or iv.low is None or iv.high is None:
            raise InvalidOptions(
                f"input {spec.name!r} is {spec.dtype}: quantcompare cannot guess valid values for it",
                hint=_integer_values_hint(spec),
            )
        lo, hi = int(iv.low), int(iv.high)
        return f"uniform int [{lo}, {hi})", lambda rng, shape: rng.integers(lo, hi, size=shape).astype(dtype)
    raise InvalidOptions(f"input {spec.name!r} has dtype {spec.dtype}, which quantcompare cannot generate",
                         hint="upload calibration data as .npz")


# What a tensor of these integer types usually holds, and the range that example takes. 16-bit
# inputs are PCM audio (VAD and speech models from the wheels take int16 samples), 8-bit ones pixels;
# wider ones are ids into a table.
_TYPICAL_RANGE = {"int16": ("16-bit PCM audio spans the whole type", -32768, 32768),
                  "uint8": ("8-bit pixels span the whole type", 0, 256),
                  "int8": ("8-bit data spans the whole type", -128, 128)}


def _integer_values_hint(spec: InputSpec) -> str:
    """The option for an integer input, a constant first where the input is one number (a sample rate,
    a length, a flag), a range first otherwise (audio samples, pixels, ids into a table)."""
    constant = json.dumps({"input_values": {spec.name: {"constant": 16000}}})
    what, low, high = _TYPICAL_RANGE.get(spec.dtype, ("token ids run from 0 to the vocabulary size", 0, 100))
    span = json.dumps({"input_values": {spec.name: {"low": low, "high": high}}})
    if len(spec.shape) == 0:
        return (f"give the one value a real input holds, e.g. {constant} for a sample rate, or a range, "
                f"e.g. {span} (high is exclusive); or upload calibration data as .npz")
    return (f"give the values a real input holds: a range, e.g. {span} (high is exclusive; {what}), "
            f"or a constant, e.g. {constant}; or upload calibration data as .npz")


def generated_samples(specs: list[InputSpec], shapes: dict[str, tuple[int, ...]], options: ComparisonOptions,
                      *, model_ranges: dict | None = None) -> Samples:
    """``model_ranges``: ``inputs.model_ranges.InputRange`` per input, where the model states one."""
    unknown = sorted(set(options.input_values) - {s.name for s in specs})
    if unknown:
        raise InvalidOptions(f"input_values names inputs the model does not have: {', '.join(unknown)}",
                             hint=f"the model's inputs are: {', '.join(s.name for s in specs)}")
    ranges = dict(model_ranges or {})
    for name, r in list(ranges.items()):  # a range that does not broadcast to the resolved shape is dropped
        try:
            r.make(np.random.default_rng(0), shapes[name])
        except Exception:  # noqa: BLE001
            del ranges[name]
    gens = {s.name: _generator_for(s, options, ranges.get(s.name)) for s in specs}

    def draws(seed: int) -> Iterator[Feed]:
        rng = np.random.default_rng(seed)
        while True:
            # np.asarray: a 0-d input (a sample rate, a flag) comes back from numpy as a scalar, which ORT refuses.
            yield {s.name: np.asarray(gens[s.name][1](rng, shapes[s.name])) for s in specs}

    def make(seed: int, count: int) -> list[Feed]:
        return list(itertools.islice(draws(seed), count))

    info = SamplesInfo(
        source="generated",
        calibration_count=options.calibration_samples,
        eval_count=options.eval_samples,
        seed=options.seed,
        generators={name: g[0] for name, g in gens.items()},
        notes=["evaluation samples are drawn with seed+1, held out from calibration"]
        + [f"{name}: drawn in the range the model states ({gens[name][0]})" for name in ranges
           if name not in options.input_values],
    )
    return Samples(make(options.seed, options.calibration_samples), make(options.seed + 1, options.eval_samples), info,
                   more_evaluation=lambda: itertools.islice(draws(options.seed + 1), options.eval_samples, None))


def check_calibration_keys(keys, specs: list[InputSpec]) -> None:
    """The .npz holds one array per model input, named as the input, and nothing else."""
    names = [s.name for s in specs]
    missing = [n for n in names if n not in keys]
    extra = sorted(set(keys) - set(names))
    if missing or extra:
        raise InvalidCalibration(
            "calibration keys do not match the model's inputs"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; not inputs of the model: {', '.join(extra)}" if extra else ""),
            hint=f"use exactly the input names as keys: {', '.join(names)}",
        )


def samples_from_npz(
    path: Path, specs: list[InputSpec], shapes: dict[str, tuple[int, ...]], options: ComparisonOptions,
    *, max_bytes: int = 2 << 30,
) -> Samples:
    """Validate an uploaded .npz against the inputs and split it into calibration and evaluation."""
    try:
        with zipfile.ZipFile(path) as zf:  # bound the decompressed size before numpy reads it
            total = sum(i.file_size for i in zf.infolist())
        if total > max_bytes:
            raise InvalidCalibration(f"the calibration archive unpacks to {total} bytes, over the {max_bytes} byte limit",
                                     hint="upload fewer samples")
        npz = np.load(path, allow_pickle=False)
        check_calibration_keys(npz.files, specs)  # before any array is read: a stray key may unpack to GBs
        arrays = {s.name: npz[s.name] for s in specs}
    except InvalidCalibration:
        raise
    except Exception as e:
        raise InvalidCalibration(
            "the calibration file is not a readable .npz (numpy.savez) archive of plain arrays",
            hint="write it with numpy.savez(path, **{input_name: array}); object arrays are refused",
        ) from e
    names = [s.name for s in specs]
    per_input: dict[str, np.ndarray] = {}
    counts = set()
    for spec in specs:
        arr = arrays[spec.name]
        want = shapes[spec.name]
        if arr.dtype.kind == "O":
            raise InvalidCalibration(f"calibration[{spec.name!r}] holds Python objects", hint="store numeric arrays")
        if arr.ndim == len(want) + 1 and tuple(arr.shape[1:]) == want:
            stacked = arr
        elif arr.ndim == len(want) and want and want[0] == 1 and tuple(arr.shape[1:]) == want[1:]:
            stacked = arr[:, None, ...]  # samples along the batch axis, batch of 1 each
        else:
            raise InvalidCalibration(
                f"calibration[{spec.name!r}] has shape {list(arr.shape)}; expected [samples, {', '.join(map(str, want))}]",
                hint="the leading axis counts samples; the rest is the input's shape (set input_shapes for dynamic dims)",
            )
        expected = np.dtype(spec.dtype)
        if arr.dtype.kind == "f" and expected.kind == "f":
            if not np.isfinite(arr).all():
                raise InvalidCalibration(f"calibration[{spec.name!r}] contains NaN or Inf", hint="remove non-finite values")
            cast = stacked.astype(expected, copy=False)
            if not np.isfinite(cast).all():  # float64 data past float32's range becomes inf
                raise InvalidCalibration(
                    f"calibration[{spec.name!r}] is {arr.dtype} with values up to {np.abs(arr).max():g}, past the "
                    f"largest {expected} ({np.finfo(expected).max:g}) the input takes",
                    hint=f"save the values the model really receives, as {expected}")
            stacked = cast
        elif arr.dtype != expected and not (arr.dtype.kind in "iub" and expected.kind in "iub"):
            raise InvalidCalibration(f"calibration[{spec.name!r}] is {arr.dtype}, the input is {expected}",
                                     hint=f"save it as {expected}")
        else:
            cast = stacked.astype(expected, copy=False)
            if arr.size and not np.array_equal(cast, stacked):  # int64 ids past int32 would wrap around
                raise InvalidCalibration(
                    f"calibration[{spec.name!r}] is {arr.dtype} with values from {arr.min()} to {arr.max()}, which "
                    f"change when cast to {expected}, the input's type",
                    hint=f"save the values the model really receives, as {expected}")
            stacked = cast
        counts.add(stacked.shape[0])
        per_input[spec.name] = stacked
    if len(counts) != 1 or 0 in counts:
        raise InvalidCalibration(f"inputs have different or zero sample counts: {sorted(counts)}",
                                 hint="give every input the same number of samples")
    n = counts.pop()
    n_cal = min(n, options.calibration_samples)
    # Feeds only for the samples the job uses: one dict per uploaded sample was 2.9 GB in the API
    # process for a 125 KB npz of 8 M tiny samples (a small file that compresses well).
    used = min(n, n_cal + options.eval_samples)
    feeds = [{name: np.asarray(per_input[name][i]) for name in names} for i in range(used)]  # 0-d stays an array
    notes = []
    if n > n_cal:
        evaluation = feeds[n_cal:n_cal + options.eval_samples]
        notes.append(f"first {n_cal} samples calibrate, the next {len(evaluation)} evaluate (held out)")
    else:
        evaluation = feeds[: options.eval_samples]
        notes.append("every uploaded sample calibrates; evaluation reuses the first of them (upload more to hold some out)")
    info = SamplesInfo(
        source="uploaded", calibration_count=n_cal, eval_count=len(evaluation),
        generators={name: "uploaded" for name in names}, notes=notes, eval_held_out=n > n_cal,
    )
    # The held-out samples evaluation left, up to what the per-tensor table may use (views: the feeds
    # above already keep the uploaded arrays alive).
    first = n_cal + len(evaluation)
    rest = {name: per_input[name][first: first + max(0, options.layers.max_samples - len(evaluation))]
            for name in names} if n > first else {}
    more = None
    if rest:
        def more() -> Iterator[Feed]:
            return ({name: np.asarray(rest[name][i]) for name in names} for i in range(len(rest[names[0]])))
    return Samples(feeds[:n_cal], evaluation, info, more_evaluation=more)
