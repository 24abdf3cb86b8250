"""Conv and ConvTranspose -> aten.conv{1,2,3}d / aten.conv_transpose{1,2,3}d.

The bias stays an argument of the conv call (not a separate add) because torchao's XNNPACK
quantizer annotates the conv's weight and bias together only in that form. Padding that torch's
conv cannot express (asymmetric SAME/explicit pads) becomes an F.pad in front of the conv
(aten.constant_pad_nd), which the quantizer shares observers through.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..registry import ConvertContext, OnnxNode, UnsupportedNode, converter
from ._spatial import check_rank, explicit_pads, ints, spatial_shape, text, torch_pad_list

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _operands(node: OnnxNode, inputs: list[torch.Tensor | None]):
    """(x, w, bias or None, spatial rank, kernel, strides, dilations, group): what Conv and ConvTranspose
    read alike from their inputs and attributes."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    n = check_rank(node, x)
    return (x, w, b, n, [int(k) for k in w.shape[2:]], ints(node, "strides", n, 1), ints(node, "dilations", n, 1),
            int(node.attrs.get("group", 1)))


@converter("Conv", since=1)
def conv(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x, w, b, n, kernel, strides, dilations, group = _operands(node, inputs)
    begin, end = explicit_pads(node, spatial_shape(ctx, node, x), kernel, strides, dilations,
                               dilated_kernel_for_same=True)
    if begin == end and all(p >= 0 for p in begin):
        padding = begin
    else:
        # Asymmetric: pad the difference explicitly, leave the symmetric part to the conv.
        padding = [max(0, min(p, q)) for p, q in zip(begin, end)]
        x = F.pad(x, torch_pad_list([p - s for p, s in zip(begin, padding)],
                                    [q - s for q, s in zip(end, padding)]))
    return _CONV[n](x, w, b, stride=strides, padding=padding, dilation=dilations, groups=group)


@converter("ConvTranspose", since=1)
def conv_transpose(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x, w, b, n, kernel, strides, dilations, group = _operands(node, inputs)
    out_pad = ints(node, "output_padding", n, 0)
    in_sizes = spatial_shape(ctx, node, x)
    auto_pad = text(node.attrs.get("auto_pad"), "NOTSET")
    # Full size: every input position's kernel footprint, before pads and output_padding.
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_sizes, strides, kernel, dilations)]
    output_shape = node.attrs.get("output_shape")
    if output_shape:
        target = [int(v) for v in output_shape][-n:]
        begin, end = [], []
        for f, op, t in zip(full, out_pad, target):
            total = f + op - t
            if total < 0:
                raise UnsupportedNode(f"ConvTranspose {node.name!r}: output_shape {target} is larger than "
                                      f"the full output {full} plus output_padding")
            # ONNX spec (and ORT 1.32, pinned by the tests): SAME_UPPER cuts the odd element at
            # the end, every other auto_pad at the start.
            head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begin.append(head)
            end.append(total - head)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX: output = input * stride; the surplus is cut, the odd element at the end for UPPER.
        begin, end = [], []
        for f, op, i, s in zip(full, out_pad, in_sizes, strides):
            total = max(0, f + op - i * s)
            head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begin.append(head)
            end.append(total - head)
    elif auto_pad == "VALID":
        begin, end = [0] * n, [0] * n
    else:
        pads = ints(node, "pads", 2 * n, 0)
        begin, end = pads[:n], pads[n:]
    if any(p < 0 for p in begin + end):
        raise UnsupportedNode(f"ConvTranspose {node.name!r}: negative pads {begin + end}")

    # torch pads both sides equally and adds output_padding at the end: give it the common
    # part, then cut what is left from the side that had more.
    sym = [min(p, q) for p, q in zip(begin, end)]
    torch_out_pad = list(out_pad)
    bias_after = None
    if any(op >= s and op >= d for op, s, d in zip(out_pad, strides, dilations)):
        # torch refuses output_padding >= both stride and dilation; pad zeros after, bias after that.
        torch_out_pad, bias_after, b = [0] * n, b, None
    y = _CONV_T[n](x, w, b, stride=strides, padding=sym, output_padding=torch_out_pad, groups=group,
                   dilation=dilations)
    if bias_after is not None or torch_out_pad != list(out_pad):
        y = F.pad(y, torch_pad_list([0] * n, [op - t for op, t in zip(out_pad, torch_out_pad)]))
    cut_begin = [p - s for p, s in zip(begin, sym)]
    cut_end = [q - s for q, s in zip(end, sym)]
    if any(cut_begin) or any(cut_end):
        y = F.pad(y, torch_pad_list([-c for c in cut_begin], [-c for c in cut_end]))
    if bias_after is not None:
        y = y + bias_after.reshape([1, -1] + [1] * n)
    return y
