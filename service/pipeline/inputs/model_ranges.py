"""Value ranges the model itself states for its inputs, for generating samples without an .npz.

Generated ``normal(0, 1)`` data says nothing about a real input. Some graphs say more, in their
first ops on an input, and samples drawn from that are closer to what the model was built for:

* ids: an input used as the indices of a ``Gather`` on an initializer (an embedding table) is
  valid in ``[0, rows)``: the table's size on the gathered axis (a float input cast to an integer
  on the way, as Keras exports ids, is drawn as whole numbers in that range too; so is an input whose
  columns a Gather or Slice picks before the lookup); an input one-hot encoded by
  ``Equal`` with a constant ``arange(K)`` (jax's ``one_hot``, as in magika) in ``[0, K)``.
* normalized inputs: ``(x - mean) / std`` (``Sub`` then ``Div``/``Mul`` by constants) or a
  ``BatchNormalization`` directly on the input: ``x`` is drawn as ``mean + std * normal(0, 1)``
  (per channel, broadcast as the model broadcasts), so what the network sees after its own
  normalization is ``normal(0, 1)``.
* scaled pixels: ``x / 255`` or ``x * (1/255)`` on the input: ``x`` is drawn ``uniform [0, 255)``.
* detector settings: an input read only as NonMaxSuppression's ``max_output_boxes_per_class``,
  ``iou_threshold`` or ``score_threshold`` is held at a usual value (100, 0.5, 0.25).
* bytes: a uint8 (int8) input whose every value is cast to float (an image as TF exports it,
  ``[1, H, W, 3]`` uint8) is drawn over the whole type, ``uniform int [0, 256)`` (``[-128, 128)``).

Only the ONNX graph is read (an uploaded ONNX file); an explicit ``input_values`` option wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from service.pipeline.vocabulary import SHAPE_READING_OPS, is_onnx_domain

Generator = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]

_PASS_THROUGH = ("Cast", "Identity")  # ids often go through a Cast to int64 first
# Ops that move ids around without changing their values (their input 0), and ops that read only
# the shape: followed, resp. ignored, on the way from an id input to what consumes its values.
_ID_MOVES = ("Cast", "Identity", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Flatten", "Transpose",
             # as their data (input 0) ids keep their values: a column picked before the lookup (LORE's
             # dets [1, N, 8], each corner coordinate a Gather(axis=2) into a position embedding)
             "Gather", "GatherElements", "Slice")
_FLOAT_TYPES = (1, 10, 11, 16)  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


@dataclass(frozen=True)
class InputRange:
    description: str  # what the report shows as the generator, e.g. "uniform int [0, 1000)"
    why: str  # what in the model says so
    make: Generator


def _consumers(graph) -> dict[str, list]:
    out: dict[str, list] = {}
    for n in graph.node:
        if not is_onnx_domain(n.domain):
            continue
        for i, name in enumerate(n.input):
            out.setdefault(name, []).append((n, i))
    return out


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            from onnx import helper

            return helper.get_attribute_value(a)
    return default


def _values(graph):
    """Initializers and Constant outputs as TensorProtos (read as arrays only when small), and numpy_helper."""
    from onnx import numpy_helper

    vals: dict = {}
    for t in graph.initializer:
        vals[t.name] = t  # converted lazily (an embedding table may be large); external ones give dims only
    for n in graph.node:
        if n.op_type == "Constant" and is_onnx_domain(n.domain) and len(n.output) == 1:
            for a in n.attribute:
                if a.name == "value" and a.HasField("t"):
                    vals[n.output[0]] = a.t
    return vals, numpy_helper


def _array(proto, numpy_helper, max_elements=1 << 16):
    if proto.data_location == 1 or int(np.prod(list(proto.dims) or [1])) > max_elements:
        return None  # external data is not read here (numpy_helper would resolve it against the cwd)
    try:
        return numpy_helper.to_array(proto)
    except Exception:  # noqa: BLE001 - an unreadable constant just gives no range
        return None


def _follow(name: str, consumers) -> list:
    """Consumers of ``name``, looking through Cast/Identity."""
    found = []
    for node, idx in consumers.get(name, []):
        if node.op_type in _PASS_THROUGH:
            found += _follow(node.output[0], consumers)
        else:
            found.append((node, idx))
    return found


def _id_uses(name, consumers, depth=0) -> list:
    uses = []
    for node, idx in consumers.get(name, []):
        if node.op_type in SHAPE_READING_OPS:
            continue
        if node.op_type in _ID_MOVES and idx == 0 and depth < 8:
            uses += _id_uses(node.output[0], consumers, depth + 1)
        else:
            uses.append((node, idx))
    return uses


def _one_hot_classes(node, idx, tables, numpy_helper) -> int | None:
    """``Equal(ids, arange(K))``: a one-hot (jax's ``one_hot``, magika); K, or None.

    K is at least 2: ``Equal(mask, 0)`` against one scalar is a flag test (a padding mask), and
    reading it as a one-hot of one class drew every value 0 (every position padded: NaN in the
    attention's softmax, and no path could calibrate)."""
    other = node.input[1 - idx] if len(node.input) == 2 else None
    arr = _array(tables[other], numpy_helper) if other in tables else None
    if arr is None or arr.size == 0 or arr.dtype.kind not in "iu":
        return None
    values = np.unique(arr)
    k = int(values.size)
    return k if k >= 2 and np.array_equal(values, np.arange(k)) else None


def _ids_range(name, consumers, tables, numpy_helper, dtype) -> InputRange | None:
    rows = []
    for node, idx in _id_uses(name, consumers):
        if node.op_type == "Equal":
            k = _one_hot_classes(node, idx, tables, numpy_helper)
            if k is None:
                return None
            rows.append((k, f"the one-hot classes 0..{k - 1} it is compared with (Equal with a constant arange)"))
            continue
        if node.op_type != "Gather" or idx != 1 or node.input[0] not in tables:
            return None  # used as anything else too: no single range to trust
        dims = list(tables[node.input[0]].dims)
        axis = int(_attr(node, "axis", 0))
        if not dims or not -len(dims) <= axis < len(dims):
            return None
        rows.append((dims[axis], f"the {dims[axis]} rows of {node.input[0]!r} it indexes (Gather on an initializer)"))
    if not rows:
        return None
    n, why = min(rows)
    if n < 1:
        return None
    np_dtype = np.dtype(dtype)
    return InputRange(f"uniform int [0, {n})", why,
                      lambda rng, shape: rng.integers(0, n, size=shape).astype(np_dtype))


def _byte_range(name, consumers, dtype) -> InputRange | None:
    """A uint8/int8 input read only through a Cast to float: every value of the type is an input."""
    if np.dtype(dtype) not in (np.uint8, np.int8):
        return None
    casts = []
    for node, idx in consumers.get(name, []):  # moves first (a Transpose NHWC -> NCHW), then the Cast
        if node.op_type in SHAPE_READING_OPS:
            continue
        if node.op_type in _ID_MOVES and node.op_type != "Cast" and idx == 0:
            inner = _byte_range(node.output[0], consumers, dtype)
            if inner is None:
                return None
            casts.append(node)
        elif node.op_type == "Cast" and int(_attr(node, "to", 0)) in _FLOAT_TYPES:
            casts.append(node)
        else:
            return None
    if not casts:
        return None
    info = np.iinfo(np.dtype(dtype))
    lo, hi = int(info.min), int(info.max) + 1
    return InputRange(f"uniform int [{lo}, {hi})", f"the model casts the {np.dtype(dtype).name} input to float "
                      "(bytes, as an image): every value of the type",
                      lambda rng, shape: rng.integers(lo, hi, size=shape).astype(np.dtype(dtype)))


# NonMaxSuppression's knobs, by input position: a value the caller picks, not data. The ONNX spec
# bounds iou_threshold to [0, 1] (ORT refuses others: non_max_suppression_helper.h); the values are
# common defaults (torchvision / ultralytics detectors).
_NMS_KNOBS = {2: ("max_output_boxes_per_class", 100), 3: ("iou_threshold", 0.5), 4: ("score_threshold", 0.25)}


def _nms_knob_range(name, consumers, dtype) -> InputRange | None:
    """An input read only as one NonMaxSuppression parameter (after moves): that knob's usual value."""
    uses = []
    stack = [name]
    while stack:
        for node, idx in consumers.get(stack.pop(), []):
            if node.op_type in _ID_MOVES and idx == 0:
                stack.append(node.output[0])
            elif node.op_type == "NonMaxSuppression" and idx in _NMS_KNOBS:
                uses.append((node, idx))
            else:
                return None
    if not uses or len({idx for _, idx in uses}) != 1:
        return None
    knob, value = _NMS_KNOBS[uses[0][1]]
    node = uses[0][0]
    label = f"NonMaxSuppression '{node.name}'" if node.name else "NonMaxSuppression"
    return InputRange(f"constant {value:g}", f"the model reads it as the {knob} of {label}: a setting, not data; "
                      "pass input_values to use yours",
                      lambda rng, shape: np.full(shape, value, dtype=np.dtype(dtype)))


def _normalization_range(name, consumers, consts, numpy_helper, dtype, shape_rank) -> InputRange | None:
    uses = _follow(name, consumers)
    if len(uses) != 1:
        return None
    node, idx = uses[0]
    np_dtype = np.dtype(dtype)

    def const(n):
        p = consts.get(n)
        return None if p is None else _array(p, numpy_helper)

    if node.op_type == "BatchNormalization" and idx == 0:
        mean, var = const(node.input[3]), const(node.input[4])
        if mean is None or var is None or mean.ndim != 1:
            return None
        eps = float(_attr(node, "epsilon", 1e-5))
        std = np.sqrt(np.maximum(var, 0) + eps).astype(np.float64)
        bshape = (mean.shape[0],) + (1,) * max(shape_rank - 2, 0)
        return InputRange(f"mean + std * normal(0, 1) per channel ({mean.shape[0]} channels)",
                          "a BatchNormalization with running statistics reads the input first",
                          lambda rng, shape: (mean.reshape(bshape) + std.reshape(bshape)
                                              * rng.standard_normal(shape)).astype(np_dtype))
    if node.op_type in ("Div", "Mul") and idx == 0:
        k = const(node.input[1])
        if k is not None and k.size == 1:
            scale = float(k.reshape(())) if node.op_type == "Div" else (1.0 / float(k.reshape(())) if float(k.reshape(())) else 0)
            if abs(scale - 255.0) < 0.5:
                return InputRange("uniform [0, 255)", f"the model divides the input by 255 ({node.op_type} by a constant)",
                                  lambda rng, shape: rng.uniform(0, 255, size=shape).astype(np_dtype))
        return None
    if node.op_type == "Sub" and idx == 0:
        mean = const(node.input[1])
        after = _follow(node.output[0], consumers)
        if mean is None or len(after) != 1:
            return None
        nxt, nidx = after[0]
        k = const(nxt.input[1]) if nidx == 0 and nxt.op_type in ("Div", "Mul") else None
        if k is None:
            return None
        with np.errstate(divide="ignore"):
            std = k.astype(np.float64) if nxt.op_type == "Div" else 1.0 / k.astype(np.float64)
        if not np.all(np.isfinite(std)) or np.any(std <= 0):
            return None
        try:
            np.broadcast_shapes(mean.shape, std.shape)
        except ValueError:
            return None
        return InputRange("mean + std * normal(0, 1), with the model's own mean/std",
                          f"the model normalizes the input first: (x - mean) / std ({node.op_type} then {nxt.op_type} "
                          "by constants)",
                          lambda rng, shape: (mean + std * rng.standard_normal(shape)).astype(np_dtype))
    return None


def input_ranges_from_onnx(model, specs) -> dict[str, InputRange]:
    """``{input name: range}`` for the inputs whose first ops state a range; the others are absent."""
    tables_and_consts, numpy_helper = _values(model.graph)
    consumers = _consumers(model.graph)
    out: dict[str, InputRange] = {}
    for spec in specs:
        kind = np.dtype(spec.dtype).kind  # specs.FEEDABLE_DTYPES: numpy dtypes only
        if kind in "iu":
            r = (_ids_range(spec.name, consumers, tables_and_consts, numpy_helper, spec.dtype)
                 or _byte_range(spec.name, consumers, spec.dtype) or _nms_knob_range(spec.name, consumers, spec.dtype))
        elif kind == "f":
            # ids fed as float (Keras exports: float -> Cast to int64 -> Gather on an embedding table)
            # first: normal(0, 1) there is -2..2, and negative ids index from the end
            r = (_ids_range(spec.name, consumers, tables_and_consts, numpy_helper, spec.dtype)
                 or _normalization_range(spec.name, consumers, tables_and_consts, numpy_helper, spec.dtype, len(spec.shape))
                 or _nms_knob_range(spec.name, consumers, spec.dtype))
        else:
            r = None
        if r is not None:
            out[spec.name] = r
    return out
