"""Sizes the data decides (a NonZero's count), carried through the converted module as torch SymInts.

The module folds every Shape of a static tensor into a numpy constant (module.py). A NonZero's output has a
size the values decide: torch.export gives it an unbacked symbol (u0) and carries it through gathers,
reshapes, aranges and fills, as long as the size reaches them as a SymInt and never as a number fixed at
build time. So (``module.GraphRunner``):

- the outputs of a NonZero, and of any kept node reading them, are *data-sized* (``GraphRunner.dynamic``);
- a Shape or Size of a data-sized tensor, and the shape arithmetic on its result (``SIZE_OPS``: Gather,
  Concat, Unsqueeze, Slice, Add, Mul, ...), are *size nodes*: kept in the plan and evaluated at every
  forward with numpy on object arrays of Python ints and SymInts (``size_values``), so a converter reading
  them with ``ctx.const`` gets the symbolic size (const_ints keeps a SymInt as it is);
- any other node reading a size runs as a torch op (ConstantOfShape, Range, Reshape, Expand, ...), a size
  read as data becoming a tensor (``size_tensor``), and its outputs are data-sized too.

In an eager run (the build, the parity check) every size is a plain int, and the same code computes each
sample's own sizes, where a folded constant would have kept the first sample's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .op_sets import CONVERTED_SELECTION_OPS, SIZE_ARITHMETIC_OPS

# The ops whose outputs may have a size the values decide, for which a converter exists; the shape arithmetic
# evaluated on sizes (numpy object arrays) rather than as torch ops.
DATA_SIZED_OPS = CONVERTED_SELECTION_OPS
SIZE_OPS = SIZE_ARITHMETIC_OPS
_INT_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}  # ONNX TensorProto integer types


def is_symbolic(v: Any) -> bool:

    return isinstance(v, torch.SymInt)


def as_dim(v: Any):
    """A size as the torch graph takes it: a SymInt as is, anything else as a Python int."""
    return v if is_symbolic(v) else int(v)


def shape_value(dims) -> np.ndarray:
    """A Shape's value: int64 when every dim is a number, else an object array holding the SymInts."""
    dims = list(dims)
    if any(is_symbolic(d) for d in dims):
        return np.array(dims, dtype=object)
    return np.array([int(d) for d in dims], dtype=np.int64)


def size_tensor(value: np.ndarray):
    """A size value (object array of ints and SymInts) as an int64 tensor in the torch graph."""

    flat = [torch.scalar_tensor(as_dim(v), dtype=torch.int64) for v in np.asarray(value, dtype=object).reshape(-1)]
    if not flat:
        return torch.zeros(value.shape, dtype=torch.int64)
    return torch.stack(flat).reshape(value.shape)


def _axes(node, args, index: int) -> list[int] | None:
    axes = node.attrs.get("axes")
    if axes is None and len(args) > index and args[index] is not None:
        axes = np.asarray(args[index]).reshape(-1).tolist()
    return None if axes is None else [int(a) for a in axes]


def _trunc_div(a, b):
    """ONNX's integer Div truncates toward zero; a symbolic size is never negative, so floor division is it."""
    if is_symbolic(a) or is_symbolic(b):
        return a // b
    q = int(a) // int(b)
    return q + 1 if q < 0 and q * int(b) != int(a) else q


def size_values(node, args: list[np.ndarray | None]) -> list[np.ndarray]:
    """``node`` (one of SIZE_OPS) evaluated on its inputs' values, which may hold SymInts."""

    op, attrs = node.op_type, node.attrs
    x = None if not args or args[0] is None else np.asarray(args[0], dtype=object)
    if op == "Identity":
        return [x]
    if op == "Cast":
        if int(attrs.get("to", 7)) not in _INT_TYPES:
            raise ValueError(f"Cast of a size to ONNX type {attrs.get('to')}")
        return [x]
    if op == "Unsqueeze":
        out = x
        axes = _axes(node, args, 1)
        rank = x.ndim + len(axes)
        for a in sorted(a + rank if a < 0 else a for a in axes):
            out = np.expand_dims(out, a)
        return [out]
    if op == "Squeeze":
        axes = _axes(node, args, 1)
        return [np.squeeze(x, axis=None if axes is None else tuple(a + x.ndim if a < 0 else a for a in axes))]
    if op == "Concat":
        axis = int(attrs.get("axis", 0))
        return [np.concatenate([np.asarray(a, dtype=object) for a in args if a is not None], axis=axis)]
    if op == "Gather":
        axis = int(attrs.get("axis", 0))
        idx = np.asarray(args[1]).astype(np.int64)
        idx = np.where(idx < 0, idx + x.shape[axis], idx)
        return [np.take(x, idx, axis=axis)]
    if op == "Slice":
        starts, ends = (np.asarray(args[i]).reshape(-1).tolist() for i in (1, 2))
        axes = _axes(node, args, 3) or list(range(len(starts)))
        steps = np.asarray(args[4]).reshape(-1).tolist() if len(args) > 4 and args[4] is not None else [1] * len(starts)
        index = [slice(None)] * x.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            index[a] = slice(int(s), int(e), int(st))
        return [x[tuple(index)]]
    binary = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b, "Div": _trunc_div,
              "Max": torch.sym_max, "Min": torch.sym_min}
    if op in binary:
        return [np.frompyfunc(binary[op], 2, 1)(x, np.asarray(args[1], dtype=object)).astype(object)]
    if op == "Neg":
        return [-x]
    if op.startswith("Reduce"):  # ReduceProd, ReduceSum
        axes = _axes(node, args, 1)
        keep = bool(attrs.get("keepdims", 1))
        reduce = np.prod if op == "ReduceProd" else np.sum
        return [np.asarray(reduce(x, axis=None if not axes else tuple(axes), keepdims=keep), dtype=object)]
    raise ValueError(f"{op} on a size")
