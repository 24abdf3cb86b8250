"""Reductions (C1): Reduce* (axes attribute before opset 18 - ReduceSum before 13 -, axes input after),
ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax (2-D coercion before opset 13), CumSum, CumProd, TopK (static k)."""
from __future__ import annotations


import torch
from ..registry import UnsupportedNode, converter
from ._common import const_ints, norm_axis


# op -> the opset whose version takes axes as an input
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce(op_type: str, fn_name: str):
    @converter(op_type)
    def convert(ctx, node, inputs):

        x = inputs[0]
        if ctx.opset >= _AXES_INPUT_SINCE.get(op_type, 18):
            axes = const_ints(ctx, node, 1, "axes")
        else:
            a = node.attr("axes")
            axes = list(a) if a is not None else None
        keep = bool(node.attr("keepdims", 1))
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.dim()))
        axes = sorted(norm_axis(a, x.dim()) for a in axes)
        if x.dim() == 0:
            return _apply(fn_name, x, None, keep)
        return _apply(fn_name, x, axes, keep)

    convert.__name__ = f"convert_{op_type}"
    return convert


def _apply(fn_name, x, axes, keep):

    dims = tuple(axes) if axes is not None else ()
    if fn_name == "sum":
        return torch.sum(x, dims, keepdim=keep) if dims else x
    if fn_name == "mean":
        return torch.mean(x, dims, keepdim=keep) if dims else x
    if fn_name == "max":
        return torch.amax(x, dims, keepdim=keep) if dims else x
    if fn_name == "min":
        return torch.amin(x, dims, keepdim=keep) if dims else x
    if fn_name == "prod":
        out = x
        for d in sorted(dims, reverse=True):
            out = torch.prod(out, d, keepdim=keep)
        return out
    if fn_name == "l1":
        return torch.sum(torch.abs(x), dims, keepdim=keep)
    if fn_name == "l2":
        return torch.sqrt(torch.sum(x * x, dims, keepdim=keep))
    if fn_name == "sumsquare":
        return torch.sum(x * x, dims, keepdim=keep)
    if fn_name == "logsum":
        return torch.log(torch.sum(x, dims, keepdim=keep))
    if fn_name == "logsumexp":
        return torch.logsumexp(x, dims, keepdim=keep)
    raise AssertionError(fn_name)


for _op, _fn in (("ReduceSum", "sum"), ("ReduceMean", "mean"), ("ReduceMax", "max"), ("ReduceMin", "min"),
                 ("ReduceProd", "prod"), ("ReduceL1", "l1"), ("ReduceL2", "l2"), ("ReduceSumSquare", "sumsquare"),
                 ("ReduceLogSum", "logsum"), ("ReduceLogSumExp", "logsumexp")):
    _reduce(_op, _fn)


def _arg(op_type: str, largest: bool):
    @converter(op_type)
    def convert(ctx, node, inputs):

        x = inputs[0]
        axis = norm_axis(int(node.attr("axis", 0)), x.dim())
        keep = bool(node.attr("keepdims", 1))
        if node.attr("select_last_index", 0):
            flipped = x.flip(axis)
            idx = (torch.argmax if largest else torch.argmin)(flipped, axis, keepdim=keep)
            return x.shape[axis] - 1 - idx
        return (torch.argmax if largest else torch.argmin)(x, axis, keepdim=keep)

    return convert


_arg("ArgMax", True)
_arg("ArgMin", False)


# ------------------------------------------------------------------------------------------
# Softmax/LogSoftmax/Hardmax (2-D coercion before opset 13, one axis after), CumSum, TopK (static k)

def _softmax(op_type: str, kind: str):
    @converter(op_type)
    def convert(ctx, node, inputs):

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

    return torch.nn.functional.one_hot(torch.argmax(x, axis), x.shape[axis]).movedim(-1, axis).to(x.dtype)


_softmax("Softmax", "soft")
_softmax("LogSoftmax", "log")
_softmax("Hardmax", "hard")


def _cumulative(ctx, node, inputs, *, product: bool):
    """CumSum / CumProd with ONNX's reverse and exclusive attributes."""

    x = inputs[0]
    axis = norm_axis(const_ints(ctx, node, 1, "axis")[0], x.dim())
    if node.attr("reverse", 0):
        x = x.flip(axis)
    y = torch.cumprod(x, axis) if product else torch.cumsum(x, axis)
    if node.attr("exclusive", 0) and product:  # shift by one, starting at 1 (a division would fail on 0)
        y = torch.cat([torch.ones_like(x.narrow(axis, 0, 1)), y.narrow(axis, 0, x.shape[axis] - 1)], axis)
    elif node.attr("exclusive", 0):
        y = y - x
    if node.attr("reverse", 0):
        y = y.flip(axis)
    return y.to(inputs[0].dtype)


@converter("CumSum")
def cumsum(ctx, node, inputs):
    return _cumulative(ctx, node, inputs, product=False)


@converter("CumProd", since=26)
def cumprod(ctx, node, inputs):
    return _cumulative(ctx, node, inputs, product=True)


@converter("TopK")
def topk(ctx, node, inputs):

    x = inputs[0]
    if ctx.opset >= 10:
        k = const_ints(ctx, node, 1, "k")[0]
    else:
        k = int(node.attr("k"))
    axis = int(node.attr("axis", -1))
    largest = bool(node.attr("largest", 1))
    # sorted=0 leaves the order to the runtime: sorted is one. Equal values may come out in another
    # order than ONNX's (lower index first): torch.sort(stable=True) would match it, but has no
    # ONNX export; parity.py tells such a tie from a conversion fault instead.
    values, idx = torch.topk(x, k, dim=axis, largest=largest, sorted=True)
    return [values, idx]
