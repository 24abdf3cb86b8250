"""Small helpers shared by converters (C1). Underscore: not a converter module, but imported anyway."""
from __future__ import annotations

import numpy as np
from onnx import helper
import torch

from ..data_sizes import as_dim
from ..registry import ConvertContext, OnnxNode, UnsupportedNode

# ONNX TensorProto data type -> torch dtype name
ONNX_TO_TORCH = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
    10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
}


def torch_dtype(onnx_type: int):

    name = ONNX_TO_TORCH.get(int(onnx_type))
    if name is None:
        try:
            text = helper.tensor_dtype_to_string(int(onnx_type)).removeprefix("TensorProto.")
        except (KeyError, ValueError):
            text = "unknown"
        raise UnsupportedNode(f"ONNX data type {onnx_type} ({text}), which torch has no tensor type for")
    if name in ("uint16", "uint32", "uint64"):
        return torch.int64  # torch has no general unsigned >8-bit arithmetic; values fit in int64
    return getattr(torch, name)


def const_ints(ctx: ConvertContext, node: OnnxNode, index: int, what: str) -> list[int] | None:
    """A static integer list read from input ``index`` (None when the input is omitted)."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    value = ctx.const(node.inputs[index])
    if value is None:
        raise UnsupportedNode(f"{node.op_type}: {what} (input {index}) is computed at run time, not a constant")
    # a size the data decides stays a SymInt (data_sizes.py); torch takes it where it takes an int
    return [as_dim(v) for v in np.asarray(value).reshape(-1).tolist()]


def const_scalar(ctx: ConvertContext, node: OnnxNode, index: int, what: str):
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    value = ctx.const(node.inputs[index])
    if value is None:
        raise UnsupportedNode(f"{node.op_type}: {what} (input {index}) is computed at run time, not a constant")
    return np.asarray(value).reshape(-1)[0].item()


def rank_of(ctx: ConvertContext, name: str, tensor) -> int:
    return tensor.dim() if tensor is not None else len(ctx.shape(name) or ())


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis
