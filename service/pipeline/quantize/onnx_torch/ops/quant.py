"""QuantizeLinear/DequantizeLinear (C1): real fp32 models carry them around fp16/int8 weights
that fold to constants; in the float path they run as (fake) arithmetic."""
from __future__ import annotations

from ..registry import converter
from ._common import norm_axis


def _bcast(param, x, axis):
    if param is None or param.dim() == 0 or param.numel() == 1:
        return param.reshape(()) if param is not None else None
    shape = [1] * x.dim()
    shape[norm_axis(axis, x.dim())] = param.numel()
    return param.reshape(shape)


@converter("DequantizeLinear")
def dequantize(ctx, node, inputs):
    import torch

    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    axis = int(node.attr("axis", 1))
    s = _bcast(scale, x, axis)
    z = _bcast(zp, x, axis)
    xf = x.to(torch.float32)
    if z is not None:
        xf = xf - z.to(torch.float32)
    return (xf * s).to(scale.dtype)


@converter("QuantizeLinear")
def quantize(ctx, node, inputs):
    import torch

    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    axis = int(node.attr("axis", 1))
    s = _bcast(scale, x, axis)
    z = _bcast(zp, x, axis)
    dtype = zp.dtype if zp is not None else torch.uint8
    info = torch.iinfo(dtype)
    q = torch.round(x / s)
    if z is not None:
        q = q + z.to(q.dtype)
    return torch.clamp(q, info.min, info.max).to(dtype)
