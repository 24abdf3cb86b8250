"""Elementwise ops (C1): arithmetic, comparison and logic (ONNX broadcasting is numpy's, as torch's),
and the activations: Relu, LeakyRelu, PRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu (and
ORT's com.microsoft Gelu/FastGelu/BiasGelu), Softplus, Clip (attribute form < 11, input form >= 11),
Elu, Selu, Celu, Mish, Swish, Softsign, ThresholdedRelu, Shrink. Each activation maps to the torch op
PT2E's XNNPACK quantizer knows where one exists (relu, hardtanh, ...)."""
from __future__ import annotations

import math
import operator
import torch
import torch.nn.functional as F

from ..registry import UnsupportedNode, converter
from ._common import const_scalar


def _binary(op_type, fn):
    @converter(op_type)
    def convert(ctx, node, inputs, _fn=fn):
        return _fn(inputs[0], inputs[1])

    convert.__name__ = f"convert_{op_type}"
    return convert


def _div(a, b):

    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")  # ONNX integer Div truncates like C
    return a / b


def _pow(a, b):

    out = torch.pow(a, b)
    return out.to(a.dtype) if out.dtype != a.dtype else out  # ONNX: the output has the base's type


def _ops():

    return {
        "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": _div, "Pow": _pow,
        "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
        "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or,
        "Xor": torch.logical_xor, "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or,
        "BitwiseXor": torch.bitwise_xor,
    }


def _unary_ops():

    return {
        "Neg": torch.neg, "Abs": torch.abs, "Sqrt": torch.sqrt, "Exp": torch.exp, "Log": torch.log,
        "Reciprocal": torch.reciprocal, "Floor": torch.floor, "Ceil": torch.ceil, "Round": torch.round,
        "Sign": torch.sign, "Not": torch.logical_not, "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan,
        "Asin": torch.asin, "Acos": torch.acos, "Atan": torch.atan, "Sinh": torch.sinh, "Cosh": torch.cosh,
        "Asinh": torch.asinh, "Acosh": torch.acosh, "Atanh": torch.atanh, "IsNaN": torch.isnan,
        "BitwiseNot": torch.bitwise_not, "Erf": torch.erf,
    }


for _name, _fn in _ops().items():
    _binary(_name, _fn)

for _name, _fn in _unary_ops().items():
    def _make(fn):
        def convert(ctx, node, inputs):
            return fn(inputs[0])
        return convert
    converter(_name)(_make(_fn))


@converter("Mod")
def convert_mod(ctx, node, inputs):

    a, b = inputs
    if node.attr("fmod", 0):
        return torch.fmod(a, b)
    return torch.remainder(a, b)  # sign of the divisor, as ONNX fmod=0


@converter("IsInf")
def convert_isinf(ctx, node, inputs):

    x = inputs[0]
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    if pos and neg:
        return torch.isinf(x)
    if pos:
        return torch.isposinf(x)
    if neg:
        return torch.isneginf(x)
    return torch.zeros_like(x, dtype=torch.bool)


def _variadic(op_type, fn):
    @converter(op_type)
    def convert(ctx, node, inputs):
        xs = [x for x in inputs if x is not None]
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        if op_type == "Mean":
            out = out / len(xs)
        return out

    return convert


def _init_variadic():

    _variadic("Max", torch.maximum)
    _variadic("Min", torch.minimum)
    _variadic("Sum", operator.add)
    _variadic("Mean", operator.add)


_init_variadic()


@converter("Where")
def convert_where(ctx, node, inputs):

    c, a, b = inputs
    return torch.where(c.bool() if c.dtype != torch.bool else c, a, b)


@converter("BitShift")
def convert_bitshift(ctx, node, inputs):

    d = node.attr("direction")
    if d == "LEFT":
        return torch.bitwise_left_shift(inputs[0], inputs[1])
    if d == "RIGHT":
        return torch.bitwise_right_shift(inputs[0], inputs[1])
    raise UnsupportedNode(f"BitShift direction={d}")


# ------------------------------------------------------------------------------------------
# activations

@converter("Relu")
def relu(ctx, node, inputs):

    return torch.relu(inputs[0])


@converter("LeakyRelu")
def leaky_relu(ctx, node, inputs):

    return F.leaky_relu(inputs[0], node.attr("alpha", 0.01))


@converter("PRelu")
def prelu(ctx, node, inputs):

    x, slope = inputs
    # ONNX slope broadcasts unidirectionally to x; torch.prelu wants [C] for a per-channel slope.
    # Aligned from the right as ONNX broadcasts: [C, 1, 1], [1, C, 1, 1] (Keras exports) and [C] on a
    # [N, C] input are all per channel. The where() form reads x three times, so the int8 Q/DQ of the
    # Conv before it had three readers and that Conv stayed float on x86 (MTCNN: no int8 kernel).
    shape = ctx.shape(node.inputs[1])
    if shape is not None and x.dim() >= 2 and len(shape) <= x.dim():
        aligned = [1] * (x.dim() - len(shape)) + list(shape)
        channels = [i for i, d in enumerate(aligned) if d != 1]
        if not channels:
            return torch.prelu(x, slope.reshape(-1)[:1])
        if channels == [1] and aligned[1] == x.shape[1]:
            return torch.prelu(x, slope.reshape(-1))
    return torch.where(x >= 0, x, x * slope)


@converter("Sigmoid")
def sigmoid(ctx, node, inputs):

    return torch.sigmoid(inputs[0])


@converter("Tanh")
def tanh(ctx, node, inputs):

    return torch.tanh(inputs[0])


@converter("HardSigmoid")
def hard_sigmoid(ctx, node, inputs):

    alpha, beta = node.attr("alpha", 0.2), node.attr("beta", 0.5)
    if abs(alpha - 1 / 6) < 1e-6 and abs(beta - 0.5) < 1e-6:
        return F.hardsigmoid(inputs[0])
    return torch.clamp(inputs[0] * alpha + beta, 0.0, 1.0)


@converter("HardSwish")
def hard_swish(ctx, node, inputs):

    return F.hardswish(inputs[0])


@converter("Gelu", since=20)
def gelu(ctx, node, inputs):

    approx = node.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise UnsupportedNode(f"Gelu approximate={approx}")
    return F.gelu(inputs[0], approximate=approx)


@converter("Gelu", domain="com.microsoft")
def gelu_ms(ctx, node, inputs):

    return F.gelu(inputs[0])


@converter("FastGelu", domain="com.microsoft")
def fast_gelu_ms(ctx, node, inputs):

    x = inputs[0] if len(inputs) < 2 or inputs[1] is None else inputs[0] + inputs[1]
    return F.gelu(x, approximate="tanh")


@converter("BiasGelu", domain="com.microsoft")
def bias_gelu_ms(ctx, node, inputs):

    return F.gelu(inputs[0] + inputs[1])


@converter("Softplus")
def softplus(ctx, node, inputs):

    return F.softplus(inputs[0])


@converter("Softsign")
def softsign(ctx, node, inputs):

    return F.softsign(inputs[0])


@converter("Elu")
def elu(ctx, node, inputs):

    return F.elu(inputs[0], node.attr("alpha", 1.0))


@converter("Selu")
def selu(ctx, node, inputs):

    alpha, gamma = node.attr("alpha", 1.67326319217681884765625), node.attr("gamma", 1.05070102214813232421875)
    x = inputs[0]
    return gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))


@converter("Celu")
def celu(ctx, node, inputs):

    return F.celu(inputs[0], node.attr("alpha", 1.0))


@converter("Mish")
def mish(ctx, node, inputs):

    return F.mish(inputs[0])


@converter("Swish", since=24)
def swish(ctx, node, inputs):

    alpha = float(node.attr("alpha", 1.0))
    x = inputs[0]
    return F.silu(x) if alpha == 1.0 else x * torch.sigmoid(alpha * x)


@converter("ThresholdedRelu")
def thresholded_relu(ctx, node, inputs):

    x = inputs[0]
    return torch.where(x > node.attr("alpha", 1.0), x, torch.zeros_like(x))


@converter("Shrink")
def shrink(ctx, node, inputs):

    x = inputs[0]
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, torch.zeros_like(x)))


def _clip(x, lo, hi):

    if lo is None and hi is None:
        return x
    if x.is_floating_point() and lo is not None and hi is not None:
        return torch.nn.functional.hardtanh(x, float(lo), float(hi)) if lo <= hi else torch.full_like(x, float(hi))
    return torch.clamp(x, lo, hi)


@converter("Clip", until=10)
def clip_attr(ctx, node, inputs):
    return _clip(inputs[0], node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38))


@converter("Clip", since=11)
def clip_inputs(ctx, node, inputs):

    x = inputs[0]
    try:
        lo = const_scalar(ctx, node, 1, "min")
        hi = const_scalar(ctx, node, 2, "max")
    except UnsupportedNode:
        lo_t = inputs[1] if len(inputs) > 1 else None
        hi_t = inputs[2] if len(inputs) > 2 else None
        if lo_t is not None:
            x = torch.maximum(x, lo_t)
        if hi_t is not None:
            x = torch.minimum(x, hi_t)
        return x
    if lo is not None and hi is not None and lo == 0 and hi == 6 and x.is_floating_point():

        return F.relu6(x)
    if lo is not None and hi is None and lo == 0 and x.is_floating_point():
        return torch.relu(x)
    if x.is_floating_point():
        lo = -math.inf if lo is None else lo
        hi = math.inf if hi is None else hi
        if math.isinf(lo) or math.isinf(hi):
            return torch.clamp(x, None if math.isinf(lo) else lo, None if math.isinf(hi) else hi)
    return _clip(x, lo, hi)
