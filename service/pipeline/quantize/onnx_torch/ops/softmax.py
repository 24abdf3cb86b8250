"""Softmax/LogSoftmax/Hardmax (2-D coercion before opset 13, one axis after), CumSum, TopK (static k) (C1)."""
from __future__ import annotations

from ..registry import UnsupportedNode, converter
from ._common import const_ints, norm_axis


def _softmax(op_type: str, kind: str):
    @converter(op_type)
    def convert(ctx, node, inputs):
        import torch

        x = inputs[0]
        fn = {"soft": torch.softmax, "log": torch.log_softmax}.get(kind)
        if ctx.opset >= 13:
            axis = int(node.attr("axis", -1))
            if kind == "hard":
                return _hardmax(x, norm_axis(axis, x.dim()))
            return fn(x, axis)
        axis = norm_axis(int(node.attr("axis", 1)), x.dim())
        if axis == x.dim() - 1:
            return _hardmax(x, axis) if kind == "hard" else fn(x, -1)
        shape = x.shape
        flat = x.reshape(int(torch.tensor(shape[:axis]).prod().item()) if axis else 1, -1)
        y = _hardmax(flat, 1) if kind == "hard" else fn(flat, 1)
        return y.reshape(shape)

    return convert


def _hardmax(x, axis):
    import torch

    return torch.nn.functional.one_hot(torch.argmax(x, axis), x.shape[axis]).movedim(-1, axis).to(x.dtype)


_softmax("Softmax", "soft")
_softmax("LogSoftmax", "log")
_softmax("Hardmax", "hard")


@converter("CumSum")
def cumsum(ctx, node, inputs):
    import torch

    x = inputs[0]
    axis = norm_axis(const_ints(ctx, node, 1, "axis")[0], x.dim())
    if node.attr("reverse", 0):
        x = x.flip(axis)
    y = torch.cumsum(x, axis)
    if node.attr("exclusive", 0):
        y = y - x
    if node.attr("reverse", 0):
        y = y.flip(axis)
    return y.to(inputs[0].dtype)


@converter("TopK")
def topk(ctx, node, inputs):
    import torch

    x = inputs[0]
    if ctx.opset >= 10:
        k = const_ints(ctx, node, 1, "k")[0]
    else:
        k = int(node.attr("k"))
    axis = int(node.attr("axis", -1))
    largest = bool(node.attr("largest", 1))
    sort = bool(node.attr("sorted", 1))
    if not sort:
        raise UnsupportedNode("TopK sorted=0") if False else None
    values, idx = torch.topk(x, k, dim=axis, largest=largest, sorted=True)
    return [values, idx]
