"""BatchNormalization, LayerNormalization, RMSNormalization, InstanceNormalization, GroupNormalization, LpNormalization,
and ORT's com.microsoft SkipLayerNormalization / LayerNormalization forms (C1)."""
from __future__ import annotations


import torch
import torch.nn.functional as F
from ..registry import UnsupportedNode, converter


@converter("BatchNormalization")
def batch_norm(ctx, node, inputs):

    x, scale, bias, mean, var = inputs[:5]
    if node.attr("training_mode", 0):
        raise UnsupportedNode("BatchNormalization training_mode=1")
    if ctx.opset < 7 and node.attr("spatial", 1) == 0:
        raise UnsupportedNode("BatchNormalization spatial=0")
    return F.batch_norm(x, mean, var, scale, bias, False, 0.0, float(node.attr("epsilon", 1e-5)))


def _layer_norm(x, scale, bias, axis: int, eps: float):

    axis = axis + x.dim() if axis < 0 else axis
    normalized = tuple(x.shape[axis:])
    if scale is not None and tuple(scale.shape) != normalized:
        scale = scale.expand(normalized) if scale.dim() <= len(normalized) else scale.reshape(normalized)
    if bias is not None and tuple(bias.shape) != normalized:
        bias = bias.expand(normalized) if bias.dim() <= len(normalized) else bias.reshape(normalized)
    return F.layer_norm(x, normalized, scale, bias, eps)


@converter("LayerNormalization", since=17)
def layer_norm(ctx, node, inputs):
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise UnsupportedNode("LayerNormalization with Mean/InvStdDev outputs used")
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    return _layer_norm(x, scale, bias, int(node.attr("axis", -1)), float(node.attr("epsilon", 1e-5)))


@converter("LayerNormalization", domain="com.microsoft")
def layer_norm_ms(ctx, node, inputs):
    return layer_norm(ctx, node, inputs)


@converter("SimplifiedLayerNormalization")
def rms_norm(ctx, node, inputs):

    x, scale = inputs[0], inputs[1]
    axis = int(node.attr("axis", -1))
    axis = axis + x.dim() if axis < 0 else axis
    dims = tuple(range(axis, x.dim()))
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + float(node.attr("epsilon", 1e-5)))
    return y * scale


@converter("RMSNormalization", since=23)
def rms_normalization(ctx, node, inputs):
    """ONNX's own form of ORT's SimplifiedLayerNormalization (opset 23; stash_type float32 only)."""
    if int(node.attr("stash_type", 1)) != 1:
        raise UnsupportedNode("RMSNormalization stash_type other than float32")
    return rms_norm(ctx, node, inputs)


@converter("SkipLayerNormalization", domain="com.microsoft")
def skip_layer_norm_ms(ctx, node, inputs):
    x, skip, gamma = inputs[0], inputs[1], inputs[2]
    beta = inputs[3] if len(inputs) > 3 else None
    bias = inputs[4] if len(inputs) > 4 else None
    s = x + skip
    if bias is not None:
        s = s + bias
    y = _layer_norm(s, gamma, beta, -1, float(node.attr("epsilon", 1e-12)))
    outs = [y, None, None, s]
    return outs[: len(node.outputs)]


@converter("InstanceNormalization")
def instance_norm(ctx, node, inputs):

    x, scale, bias = inputs
    return F.instance_norm(x, weight=scale, bias=bias, eps=float(node.attr("epsilon", 1e-5)))


@converter("GroupNormalization", since=18)
def group_norm(ctx, node, inputs):

    x, scale, bias = inputs
    groups = int(node.attr("num_groups"))
    channels = x.shape[1]
    if scale.shape[0] != channels:  # opset 18: one scale per group
        scale = scale.repeat_interleave(channels // groups)
        bias = bias.repeat_interleave(channels // groups)
    return F.group_norm(x, groups, scale, bias, float(node.attr("epsilon", 1e-5)))


@converter("LpNormalization")
def lp_norm(ctx, node, inputs):

    p = int(node.attr("p", 2))
    return F.normalize(inputs[0], p=p, dim=int(node.attr("axis", -1)), eps=0.0)


@converter("MeanVarianceNormalization")
def mvn(ctx, node, inputs):
    x = inputs[0]
    axes = tuple(node.attr("axes", [0, 2, 3]))
    mean = x.mean(axes, keepdim=True)
    var = ((x - mean) ** 2).mean(axes, keepdim=True)
    return (x - mean) / (var.sqrt() + 1e-9)


@converter("LRN")
def lrn(ctx, node, inputs):
    """ONNX LRN: ``x / (bias + alpha / size * sum(x^2 over a channel window)) ** beta``.

    The window is ``[c - floor((size-1)/2), c + ceil((size-1)/2)]`` (ONNX's definition). torch's
    ``F.local_response_norm`` pads the other way round for an even ``size``, so the sum is
    written out here: channel padding, then ``avg_pool`` over the channel axis times ``size``.
    """

    x = inputs[0]
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    if x.dim() < 3:
        raise UnsupportedNode(f"LRN on a rank-{x.dim()} input")
    sq = (x * x).reshape(x.shape[0], 1, x.shape[1], -1)  # (N, 1, C, rest): the window runs along C
    before, after = (size - 1) // 2, size // 2
    window_sum = F.avg_pool2d(F.pad(sq, (0, 0, before, after)), (size, 1), stride=1) * size
    return x / (bias + alpha / size * window_sum.reshape(x.shape)) ** beta
