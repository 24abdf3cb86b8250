"""Elementwise arithmetic, comparison and logic ops (C1). ONNX broadcasting is numpy's, as torch's."""
from __future__ import annotations

from ..registry import UnsupportedNode, converter


def _binary(op_type, fn):
    @converter(op_type)
    def convert(ctx, node, inputs, _fn=fn):
        return _fn(inputs[0], inputs[1])

    convert.__name__ = f"convert_{op_type}"
    return convert


def _div(a, b):
    import torch

    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")  # ONNX integer Div truncates like C
    return a / b


def _pow(a, b):
    import torch

    out = torch.pow(a, b)
    return out.to(a.dtype) if out.dtype != a.dtype else out  # ONNX: the output has the base's type


def _ops():
    import operator

    import torch

    return {
        "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": _div, "Pow": _pow,
        "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
        "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or,
        "Xor": torch.logical_xor, "BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or,
        "BitwiseXor": torch.bitwise_xor,
    }


def _unary_ops():
    import torch

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
    import torch

    a, b = inputs
    if node.attr("fmod", 0):
        return torch.fmod(a, b)
    return torch.remainder(a, b)  # sign of the divisor, as ONNX fmod=0


@converter("IsInf")
def convert_isinf(ctx, node, inputs):
    import torch

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
    import operator

    import torch

    _variadic("Max", torch.maximum)
    _variadic("Min", torch.minimum)
    _variadic("Sum", operator.add)
    _variadic("Mean", operator.add)


_init_variadic()


@converter("Where")
def convert_where(ctx, node, inputs):
    import torch

    c, a, b = inputs
    return torch.where(c.bool() if c.dtype != torch.bool else c, a, b)


@converter("BitShift")
def convert_bitshift(ctx, node, inputs):
    import torch

    d = node.attr("direction")
    if d == "LEFT":
        return torch.bitwise_left_shift(inputs[0], inputs[1])
    if d == "RIGHT":
        return torch.bitwise_right_shift(inputs[0], inputs[1])
    raise UnsupportedNode(f"BitShift direction={d}")
