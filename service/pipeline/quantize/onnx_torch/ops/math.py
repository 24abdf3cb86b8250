"""MatMul, Gemm, Einsum, MatMulInteger, QuantizeLinear/DequantizeLinear (C1).

A constant 2-D right operand becomes ``F.linear``'s weight (PT2E's XNNPACK quantizer annotates
linear, not matmul, with a per-channel weight): ``MatMul(x, W[K, N])`` is ``linear(x, W.T)``. The
transpose is of a weight parameter, so convert_pt2e folds it into the quantized constant.
"""
from __future__ import annotations

from ..registry import UnsupportedNode, converter
from ._common import norm_axis


def _is_weight(ctx, name: str) -> bool:
    c = ctx.const(name)
    return c is not None and c.ndim == 2 and c.dtype.kind == "f"


@converter("MatMul")
def matmul(ctx, node, inputs):
    import torch
    import torch.nn.functional as F

    a, b = inputs
    if _is_weight(ctx, node.inputs[1]) and a.dim() >= 1 and a.is_floating_point():
        return F.linear(a, b.t())
    return torch.matmul(a, b)


@converter("Gemm")
def gemm(ctx, node, inputs):
    import torch
    import torch.nn.functional as F

    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if node.attr("transA", 0):
        a = a.t()
    weight = b if node.attr("transB", 0) else b.t()  # linear's weight is [N, K]
    bias = None
    if c is not None and beta != 0.0:
        c_shape = ctx.shape(node.inputs[2])
        n = weight.shape[0]
        if alpha == 1.0 and c_shape is not None and (tuple(c_shape) in ((n,), (1, n))):
            bias = c.reshape(-1) * beta if beta != 1.0 else c.reshape(-1)
            c = None
    if alpha != 1.0:
        weight = weight * alpha
    y = F.linear(a, weight, bias)
    if c is not None and beta != 0.0:
        y = y + (c * beta if beta != 1.0 else c)
    return y


@converter("Einsum")
def einsum(ctx, node, inputs):
    import torch

    eq = node.attr("equation", "").replace(" ", "")
    if not eq:
        raise UnsupportedNode("Einsum without an equation")
    return torch.einsum(eq, *inputs)


@converter("MatMulInteger")
def matmul_integer(ctx, node, inputs):
    import torch

    a, b = inputs[0], inputs[1]
    za = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    zb = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
    a = a.to(torch.int32) - (za.to(torch.int32) if za is not None else 0)
    b = b.to(torch.int32) - (zb.to(torch.int32) if zb is not None else 0)
    return torch.matmul(a.double(), b.double()).to(torch.int32)


# ------------------------------------------------------------------------------------------
# QuantizeLinear/DequantizeLinear: real fp32 models carry them around fp16/int8 weights that fold to
# constants; in the float path they run as (fake) arithmetic.

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
