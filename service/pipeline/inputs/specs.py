"""Input specs of a model and the concrete shapes every sample is made with."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from service.errors import InputShapeRequired, InvalidCalibration, InvalidOptions, UnsupportedModel

# A symbolic leading dim with one of these names is taken to be the batch, defaulting to 1.
_BATCH_NAMES = re.compile(r"^(batch|batch_size|batchsize|n|b|bs|N|B|None|\?|-1|unk__\d+|(p2o\.)?DynamicDimension\.0|dynamic_batch)$", re.I)
# Named like this, a dim is the batch wherever it sits (silero-vad's state is [2, batch, 128]).
_BATCH_ANYWHERE = re.compile(r"^(batch|batch_size|batchsize|dynamic_batch)$", re.I)
# Names that do not identify one dim across inputs: each occurrence is its own unknown.
_ANONYMOUS = {"?", "-1", "None"}


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: str  # numpy dtype name
    shape: tuple[int | str | None, ...]  # ints, symbolic names, or None for an unnamed unknown dim

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


def _onnx_dtype_name(elem_type: int) -> str:
    import onnx

    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # e.g. bfloat16 / float8 have no plain numpy dtype
        return onnx.TensorProto.DataType.Name(elem_type).lower()


# Dtypes a graph input may have here: the numeric ones ONNX Runtime's Python API takes as numpy
# feeds (every path feeds ORT from numpy, quantize_static's calibration reader included). bfloat16,
# float8, int4 have no numpy type ORT maps ("Numpy_type 256 can't be converted to MLDataType" for
# ml_dtypes' bfloat16), complex none ORT loads; strings ORT takes, but samples are numbers (an .npz
# of objects is refused, nothing generates text). Pinned by tests/pipeline/inputs/test_specs_and_samples.py.
FEEDABLE_DTYPES = frozenset({"float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                             "uint32", "uint64", "bool"})


def feedable(spec: InputSpec) -> InputSpec:
    """``spec``, or UnsupportedModel when no sample could be fed to it (a graph input only)."""
    if spec.dtype in FEEDABLE_DTYPES:
        return spec
    if spec.dtype in ("object", "string"):
        why = "a string input: samples here are numeric arrays, so none can be made or uploaded for it"
        hint = "upload the model from after its text front end (token ids as int64 inputs)"
    else:
        why = (f"{spec.dtype}: ONNX Runtime's Python API, which feeds every path here (quantize_static's "
               "calibration included), takes no numpy array of that type")
        hint = ("re-export the model with a float32 (or integer) input and cast to the narrow type inside the "
                "graph; its weights and ops can stay as they are")
    raise UnsupportedModel(f"input {spec.name!r} is {why}", hint=hint)


def _value_info_spec(vi) -> InputSpec:
    t = vi.type
    if not t.HasField("tensor_type"):
        raise UnsupportedModel(
            f"input or output {vi.name!r} is not a tensor (sequence/map/optional types are not supported)",
            hint="quantcompare compares tensor models; wrap the model so its inputs and outputs are tensors",
        )
    tt = t.tensor_type
    dims: list[int | str | None] = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
    return InputSpec(vi.name, _onnx_dtype_name(tt.elem_type), tuple(dims))


def input_specs_from_onnx(model) -> list[InputSpec]:
    """Graph inputs that are real inputs (old exporters also list every initializer as an input)."""
    initializers = {i.name for i in model.graph.initializer} | {s.values.name for s in model.graph.sparse_initializer}
    return [feedable(_value_info_spec(vi)) for vi in model.graph.input if vi.name not in initializers]


def output_specs_from_onnx(model) -> list[InputSpec]:
    """Graph outputs as declared; a non-tensor output (scikit-learn's ZipMap writes a sequence of maps)
    is named by its ONNX type, with no shape: the numerics compare it as numerics.as_tensor reads it."""
    return [_value_info_spec(vi) if vi.type.HasField("tensor_type") else InputSpec(vi.name, _type_name(vi.type), ())
            for vi in model.graph.output]


def _type_name(t) -> str:
    """``seq(map(int64,tensor(float32)))``: an ONNX TypeProto as the ONNX spec writes it."""
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({_onnx_dtype_name(t.tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({_type_name(t.sequence_type.elem_type)})"
    if kind == "map_type":
        return f"map({_onnx_dtype_name(t.map_type.key_type)},{_type_name(t.map_type.value_type)})"
    if kind == "optional_type":
        return f"optional({_type_name(t.optional_type.elem_type)})"
    return str(kind)


def per_sample_shape(spec: InputSpec, data_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The input shape one sample of an uploaded array has: ``array.shape[1:]``; or, when the array
    has the input's rank and the input leads with a batch (1 or symbolic), one sample per batch row."""
    if len(data_shape) == len(spec.shape) + 1:
        return tuple(data_shape[1:])
    if len(data_shape) == len(spec.shape) and spec.shape and not (isinstance(spec.shape[0], int) and spec.shape[0] != 1):
        return (1, *data_shape[1:])
    return None


def _mismatch(name: str, i: int, data: tuple[int, ...], what: str, value) -> InvalidCalibration:
    return InvalidCalibration(
        f"calibration[{name!r}] gives samples of shape {list(data)} (dim {i} = {data[i]}) but {what} {value}",
        hint="make the data and the model agree: fix the .npz (leading axis = samples, then the input's shape), "
             "or set options.input_shapes to the shape the data has",
        input=name, data_shape=list(data), dim=i,
    )


def _rank_hint(spec: InputSpec, given) -> str:
    """One value per dim: the given values aligned to the right (a missing or an extra leading batch
    of 1 is the usual slip) when that fits the fixed dims, else the fixed dims and a placeholder."""
    rank, given = len(spec.shape), [int(d) for d in given]
    while len(given) > rank and given[0] == 1:
        given = given[1:]
    if len(given) <= rank:
        lead = [d if isinstance(d, int) else 1 for d in spec.shape[:rank - len(given)]]
        aligned = lead + given
        if all(not isinstance(d, int) or d == a for d, a in zip(spec.shape, aligned)):
            return "give one value per dim; with the values you gave: " + json.dumps({"input_shapes": {spec.name: aligned}})
    example = [d if isinstance(d, int) else "<value>" for d in spec.shape]
    return "give one value per dim, e.g. " + json.dumps({"input_shapes": {spec.name: example}})


def resolved_input_shapes(
    specs: list[InputSpec], input_shapes: dict[str, list[int]], *,
    data_shapes: dict[str, tuple[int, ...]] | None = None,
    batch_dims: dict[str, int] | None = None,
) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Concrete shape per input: the ``input_shapes`` option first, then the uploaded calibration
    data (``data_shapes``: each .npz array's full shape, samples leading), then a batch default.

    ``batch_dims``: symbols the source knows to be a batch, with their default (a .pt2's leading
    torch symbol such as ``s77``, whose ``Dim`` name the archive does not keep).
    Raises InputShapeRequired naming *every* dim that still needs a value, with the option to pass,
    and InvalidCalibration naming both values when the data disagrees with the model or the option.
    """
    data_shapes = data_shapes or {}
    batch_dims = batch_dims or {}
    names = {s.name for s in specs}
    unknown = sorted(set(input_shapes) - names)
    if unknown:
        raise InvalidOptions(
            f"input_shapes names inputs the model does not have: {', '.join(unknown)}",
            hint=f"the model's inputs are: {', '.join(sorted(names))}",
        )
    resolved: dict[str, tuple[int, ...]] = {}
    notes: list[str] = []
    missing: list[str] = []
    symbols = _symbols_from_options(specs, input_shapes, notes)
    origin = {d: "options.input_shapes" for d in symbols}
    _symbols_from_data(specs, input_shapes, data_shapes, symbols, origin)
    for spec in specs:
        given = input_shapes.get(spec.name)
        if given is not None:
            resolved[spec.name] = _given_shape(spec, given, data_shapes, notes)
        else:
            resolved[spec.name] = _resolved_dims(spec, data_shapes, symbols, batch_dims, notes, missing)
    if missing:
        _raise_missing(specs, resolved, missing)
    return resolved, notes


def _symbols_from_options(specs: list[InputSpec], input_shapes: dict[str, list[int]],
                          notes: list[str]) -> dict[str, int]:
    """The symbolic dims the input_shapes option gives a value (a conflict noted, or refused where an input
    left to the symbol would have to pick one)."""
    # A symbolic name is one dim across the whole model (ONNX semantics): a value given for it in
    # one input's shape, or the batch default, fills it in every other input.
    symbols: dict[str, int] = {}
    given_in: dict[str, str] = {}  # symbol -> the input whose option shape gave its value
    conflicts: dict[str, list[tuple[str, int]]] = {}
    for spec in specs:
        given = input_shapes.get(spec.name)
        if given is not None and len(given) == len(spec.shape):
            for d, v in zip(spec.shape, given):
                if not isinstance(d, str) or d in _ANONYMOUS:
                    continue
                if d in symbols and symbols[d] != int(v):
                    # ONNX means one size per symbol, but ORT does not check it and exporters reuse names
                    # loosely: each given input keeps its own shape; an input left to the symbol cannot.
                    conflicts.setdefault(d, [(given_in[d], symbols[d])]).append((spec.name, int(v)))
                symbols.setdefault(d, int(v))
                given_in.setdefault(d, spec.name)
    for d, uses in conflicts.items():
        sizes = ", ".join(f"{size} in input_shapes[{name!r}]" for name, size in uses)
        left = [s.name for s in specs if s.name not in input_shapes and d in s.shape]
        if left:
            raise InvalidOptions(f"input_shapes gives dim {d!r} different values ({sizes}), and input(s) "
                                 f"{', '.join(map(repr, left))} take their size from it",
                                 hint=f"give {', '.join(map(repr, left))} a shape in input_shapes too, or {d!r} "
                                      "one value in every input")
        notes.append(f"dim {d!r} has different sizes across inputs ({sizes}): ONNX means one size per symbolic "
                     "dim, ONNX Runtime does not check it, so each input takes the shape given")
    return symbols


def _symbols_from_data(specs: list[InputSpec], input_shapes: dict[str, list[int]], data_shapes: dict,
                       symbols: dict[str, int], origin: dict[str, str]) -> None:
    """Then the calibration data's values, where the option gives none (into ``symbols``)."""
    for spec in specs:
        if spec.name in input_shapes or spec.name not in data_shapes:
            continue
        sample = per_sample_shape(spec, data_shapes[spec.name])
        for i, d in enumerate(spec.shape if sample is not None else ()):
            if isinstance(d, str) and d not in _ANONYMOUS:
                if d in symbols and symbols[d] != sample[i]:
                    raise _mismatch(spec.name, i, sample, f"{d} is", f"{symbols[d]} in {origin[d]}")
                symbols.setdefault(d, sample[i])
                origin.setdefault(d, f"calibration[{spec.name!r}]")


def _given_shape(spec: InputSpec, given: list[int], data_shapes: dict, notes: list[str]) -> tuple[int, ...]:
    """An input's shape from the input_shapes option, checked against the model and the data."""
    if len(given) != len(spec.shape):
        raise InvalidOptions(
            f"input_shapes[{spec.name!r}] has {len(given)} dims but the input has rank {len(spec.shape)} "
            f"(declared shape {list(spec.shape)})",
            hint=_rank_hint(spec, given),
        )
    for i, (want, got) in enumerate(zip(spec.shape, given)):
        if isinstance(want, int) and want != got:
            raise InvalidOptions(
                f"input_shapes[{spec.name!r}] dim {i} is {got} but the model fixes it at {want}",
                hint="keep fixed dims as the model declares them; only symbolic dims take values",
            )
    shape = tuple(int(d) for d in given)
    if any(not isinstance(d, int) for d in spec.shape):
        notes.append(f"{spec.name}: shape {list(given)} from the input_shapes option")
    if spec.name in data_shapes:
        sample = per_sample_shape(spec, data_shapes[spec.name])
        if sample is not None and sample != shape:
            i = next(k for k, (a, b) in enumerate(zip(sample, shape)) if a != b)
            raise _mismatch(spec.name, i, sample, "options.input_shapes gives", list(shape))
    return shape


def _resolved_dims(spec: InputSpec, data_shapes: dict, symbols: dict[str, int], batch_dims: dict[str, int],
                   notes: list[str], missing: list[str]) -> tuple[int, ...]:
    """An input's shape without the option: from the data, a symbol's value, a batch default, else -1
    (named in ``missing``)."""
    sample = per_sample_shape(spec, data_shapes[spec.name]) if spec.name in data_shapes else None
    if spec.name in data_shapes and sample is None:
        raise InvalidCalibration(
            f"calibration[{spec.name!r}] has shape {list(data_shapes[spec.name])}; the input has rank "
            f"{len(spec.shape)} (declared shape {list(spec.shape)}), so the array needs rank {len(spec.shape) + 1}",
            hint="the leading axis counts samples; the rest is the input's shape",
            input=spec.name, data_shape=list(data_shapes[spec.name]))
    dims: list[int] = []
    for i, d in enumerate(spec.shape):
        if sample is not None:
            if isinstance(d, int):
                if sample[i] != d:
                    raise _mismatch(spec.name, i, sample, f"the model fixes dim {i} at", d)
            else:  # symbols already agree (checked above)
                notes.append(f"{spec.name}: dim {i} ({d if d else 'unnamed'}) set to {sample[i]} "
                             "from the calibration data (per-sample shape = array.shape[1:])")
            dims.append(sample[i])
            continue
        if isinstance(d, int):
            dims.append(d)
        elif isinstance(d, str) and d in symbols:
            dims.append(symbols[d])
            notes.append(f"{spec.name}: dim {i} ({d}) set to {symbols[d]}, the value {d} has in another input")
        elif i == 0 and isinstance(d, str) and d in batch_dims:
            dims.append(batch_dims[d])
            symbols[d] = batch_dims[d]
            notes.append(f"{spec.name}: dim 0 ({d}, torch.export's symbol: the .pt2 does not keep the Dim's name) "
                         f"taken as the batch, set to {batch_dims[d]}")
        elif (i == 0 and (d is None or _BATCH_NAMES.match(str(d)))) or (d and _BATCH_ANYWHERE.match(str(d))):
            dims.append(1)
            if isinstance(d, str) and d not in _ANONYMOUS:
                symbols[d] = 1
            notes.append(f"{spec.name}: dim {i} ({d if d else 'unnamed'}) taken as the batch, set to 1")
        else:
            dims.append(-1)
            missing.append(f"{spec.name}[{i}] ({d if d else 'unnamed'})")
    return tuple(dims)


def _raise_missing(specs: list[InputSpec], resolved: dict[str, tuple[int, ...]], missing: list[str]):
    """InputShapeRequired naming every dim still without a value, with the option to pass."""
    example = {
        s.name: [d if isinstance(d, int) and d > 0 else "<value>" for d in resolved[s.name]]
        for s in specs if -1 in resolved[s.name]
    }
    raise InputShapeRequired(
        f"these input dims are dynamic and need a value: {', '.join(missing)}",
        hint="pass them in options, e.g. " + json.dumps({"input_shapes": example}),
        dims=missing,
    )
