"""Shared arithmetic of the windowed ops (Conv, ConvTranspose, the pools): attributes, pads, sizes.

Everything here runs at conversion time on Python ints: the pads and output sizes a converter
bakes into the torch graph are fixed numbers, so torch.export sees no shape arithmetic.
The formulas follow ONNX Runtime's CPU kernels (conv_attributes.h, pool_attributes.h), which
is what the converted module is compared with.
"""
from __future__ import annotations

from typing import Any

import torch

from ..registry import ConvertContext, OnnxNode, UnsupportedNode


def text(value: Any, default: str = "") -> str:
    """A string attribute, whether the decoder left it as bytes or str."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def ints(node: OnnxNode, key: str, n: int, default: int) -> list[int]:
    """An ints attribute of n spatial entries; an absent or empty one is n copies of default."""
    got = node.attrs.get(key)
    if got is None or len(got) == 0:
        return [default] * n
    got = [int(v) for v in got]
    if len(got) != n:
        raise UnsupportedNode(f"{node.op_type} {node.name!r}: {key}={got} does not have {n} spatial entries")
    return got


def spatial_shape(ctx: ConvertContext, node: OnnxNode, x: torch.Tensor) -> tuple[int, ...]:
    """The static spatial dims of input 0 (dims 2..): from shape inference, else from the traced tensor."""
    shape = ctx.shape(node.inputs[0])
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        shape = tuple(int(d) for d in x.shape)
    return tuple(shape[2:])


def explicit_pads(node: OnnxNode, in_sizes, kernel, strides, dilations, *,
                  dilated_kernel_for_same: bool) -> tuple[list[int], list[int]]:
    """(pads_begin, pads_end) per spatial dim after resolving auto_pad, as ORT does.

    ORT's Conv computes SAME padding with the dilated kernel; its pools use the undilated kernel
    and keep a negative padding (stride above kernel) as it is, halved with C++'s truncating
    division (pool_attributes.h ComputeSizePadDilations), hence the flag.
    """
    n = len(kernel)
    auto_pad = text(node.attrs.get("auto_pad"), "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = ints(node, "pads", 2 * n, 0)
        return pads[:n], pads[n:]
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedNode(f"{node.op_type} {node.name!r}: auto_pad={auto_pad!r} is not an ONNX value")
    begin, end = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        k_eff = (k - 1) * d + 1 if dilated_kernel_for_same else k
        target = (size + s - 1) // s
        needed = (target - 1) * s + k_eff - size
        if dilated_kernel_for_same:
            needed = max(0, needed)
        half = needed + 1 if auto_pad == "SAME_LOWER" else needed
        head = int(half / 2)  # C++ integer division truncates toward zero
        begin.append(head)
        end.append(needed - head)
    return begin, end


def torch_pad_list(begin: list[int], end: list[int]) -> list[int]:
    """F.pad's order: last spatial dim first, (begin, end) for each."""
    out: list[int] = []
    for b, e in zip(reversed(begin), reversed(end)):
        out += [b, e]
    return out


def check_rank(node: OnnxNode, x: torch.Tensor, allowed=(3, 4, 5)) -> int:
    """Number of spatial dims; torch has the 1d/2d/3d functional forms only."""
    if x.dim() not in allowed:
        raise UnsupportedNode(f"{node.op_type} {node.name!r}: input rank {x.dim()} (torch has 1d/2d/3d forms only)")
    return x.dim() - 2
