"""MaxPool, AveragePool, LpPool and their Global forms -> aten max_pool / avg_pool / mean / amax.

Two routes per node, both static:
- native: symmetric pads torch accepts (pad <= half the kernel) and torch's output size equal to
  ORT's -> F.max_pool / F.avg_pool with padding and ceil_mode, the ops the XNNPACK quantizer knows;
- explicit: everything else (asymmetric or SAME pads, ceil_mode windows torch would drop or clip
  differently, dilated AveragePool). The input is padded to exactly the length ORT's windows span
  (F.pad), pooled without padding in floor mode, and for averages divided by a divisor map
  computed here in numpy the way ORT counts each window.
ORT's output size (pool_attributes.h ComputeOutputSize) is the reference: float division, then
truncation (floor mode) or ceil; in ceil mode ORT 1.32 drops a last window that would start at or
past ``size + pad_begin`` (older ORT sources lack that rule; the tests pin the installed one).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..registry import ConvertContext, OnnxNode, UnsupportedNode, converter
from ._spatial import check_rank, explicit_pads, ints, spatial_shape, torch_pad_list

_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _ort_out_size(size: int, k: int, s: int, d: int, pad_begin: int, pad_total: int, ceil_mode: bool) -> int:
    span = np.float32(size + pad_total - d * (k - 1) - 1) / np.float32(s) + np.float32(1)
    if not ceil_mode:
        return int(span)
    out = int(math.ceil(span))
    # ORT 1.32 drops a last window that would start in the end padding (or past it), like aten;
    # measured: test_ops_pool.py::test_ceil_mode_drops_a_window_starting_in_the_end_padding
    if (out - 1) * s >= size + pad_begin:
        out -= 1
    return out


def _torch_out_size(size: int, k: int, s: int, d: int, pad: int, ceil_mode: bool) -> int:
    # aten pooling_output_shape: a last window starting in the right padding is dropped
    out = (size + 2 * pad - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + pad:
        out -= 1
    return out


class _Windows:
    """One pooling node's static geometry: kernel, strides, dilations, pads, ORT's output size."""

    def __init__(self, ctx: ConvertContext, node: OnnxNode, x: torch.Tensor):
        self.n = check_rank(node, x)
        kernel = node.attrs.get("kernel_shape")
        if not kernel:
            raise UnsupportedNode(f"{node.op_type} {node.name!r}: no kernel_shape")
        self.kernel = [int(k) for k in kernel]
        self.strides = ints(node, "strides", self.n, 1)
        self.dilations = ints(node, "dilations", self.n, 1)
        self.ceil = bool(node.attrs.get("ceil_mode", 0))
        self.in_sizes = spatial_shape(ctx, node, x)
        # ORT pools compute SAME padding with the undilated kernel (pool_attributes.h)
        self.begin, self.end = explicit_pads(node, self.in_sizes, self.kernel, self.strides, self.dilations,
                                             dilated_kernel_for_same=False)
        self.out = [_ort_out_size(i, k, s, d, b, b + e, self.ceil) for i, k, s, d, b, e in
                    zip(self.in_sizes, self.kernel, self.strides, self.dilations, self.begin, self.end)]
        if node.op_type == "LpPool" and not self.ceil:
            # ORT's LpPool sizes its output with C++ integer division (truncating toward zero), so
            # a kernel longer than the padded input still gives one (clipped) window
            self.out = [int((i + b + e - d * (k - 1) - 1) / s) + 1 for i, k, s, d, b, e in
                        zip(self.in_sizes, self.kernel, self.strides, self.dilations, self.begin, self.end)]
        if any(o <= 0 for o in self.out):
            raise UnsupportedNode(f"{node.op_type} {node.name!r}: empty output {self.out}")

    def native_ok(self) -> bool:
        """torch's pooling with padding/ceil_mode yields exactly ORT's windows."""
        if self.begin != self.end:
            return False
        for i, k, s, d, p, o in zip(self.in_sizes, self.kernel, self.strides, self.dilations, self.begin, self.out):
            if p < 0 or p > ((k - 1) * d + 1) // 2 or _torch_out_size(i, k, s, d, p, self.ceil) != o:
                return False
            if (o - 1) * s + (k - 1) * d + 1 > i + 2 * p:  # a window reaching past the right pad
                return False
        return True

    def end_pads(self) -> list[int]:
        """Right pads that make floor-mode pooling of the padded input give exactly ``out`` windows."""
        return [max(e, (o - 1) * s + (k - 1) * d + 1 - i - b) for i, k, s, d, b, e, o in
                zip(self.in_sizes, self.kernel, self.strides, self.dilations, self.begin, self.end, self.out)]

    def padded(self, x: torch.Tensor, value: float) -> torch.Tensor:
        # negative begin pads (crop) are legal for F.pad's constant mode
        return F.pad(x, torch_pad_list(self.begin, self.end_pads()), value=value)

    def divisor(self, count_include_pad: bool) -> np.ndarray:
        """How many elements ORT divides each window's sum by, shape ``out``.

        count_include_pad: the window's taps inside [-pad_begin, size + pad_end); else the taps
        inside the input. ORT (pool_functors AveragePool*DTask) clips windows at size + pad_end.
        """
        per_dim = []
        for i, k, s, d, b, e, o in zip(self.in_sizes, self.kernel, self.strides, self.dilations,
                                       self.begin, self.end, self.out):
            taps = np.arange(o)[:, None] * s - b + np.arange(k)[None, :] * d
            # a negative end pad (SAME with stride above kernel) cuts the input short for both
            lo, hi = (-b, i + e) if count_include_pad else (0, min(i, i + e))
            per_dim.append(((taps >= lo) & (taps < hi)).sum(axis=1))
        div = per_dim[0]
        for p in per_dim[1:]:
            div = np.multiply.outer(div, p)
        return div.astype(np.float32)


@converter("MaxPool", since=1)
def max_pool(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    x = inputs[0]
    win = _Windows(ctx, node, x)
    want_indices = len(node.outputs) > 1 and bool(node.outputs[1])
    if want_indices:
        return _max_pool_with_indices(node, x, win)
    if win.native_ok():
        return _MAX[win.n](x, win.kernel, win.strides, win.begin, win.dilations, ceil_mode=win.ceil)
    # ORT starts every window at the dtype's lowest value, so a window holding only padding
    # yields lowest(), not -inf: pad with that value.
    low = torch.finfo(x.dtype).min if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    return _MAX[win.n](win.padded(x, low), win.kernel, win.strides, 0, win.dilations)


def _max_pool_with_indices(node: OnnxNode, x: torch.Tensor, win: _Windows):
    """Indices as ORT writes them: flat over the whole NCHW tensor (row major, or column major
    over the spatial dims with storage_order=1)."""
    sizes = list(win.in_sizes)
    if win.native_ok():
        y, idx = _MAX[win.n](x, win.kernel, win.strides, win.begin, win.dilations, ceil_mode=win.ceil,
                             return_indices=True)
        coords = _unravel(idx, sizes)
    else:
        # explicit route: torch's indices count positions of the padded input; shift them back
        low = torch.finfo(x.dtype).min if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
        padded_sizes = [i + b + e for i, b, e in zip(sizes, win.begin, win.end_pads())]
        y, idx = _MAX[win.n](win.padded(x, low), win.kernel, win.strides, 0, win.dilations, return_indices=True)
        coords = [c - b for c, b in zip(_unravel(idx, padded_sizes), win.begin)]
    column_major = int(node.attrs.get("storage_order", 0)) == 1
    order = list(range(win.n)) if column_major else list(reversed(range(win.n)))
    flat, stride = torch.zeros_like(idx), 1
    for k in order:
        flat = flat + coords[k] * stride
        stride *= sizes[k]
    n_batch, channels = int(x.shape[0]), int(x.shape[1])
    offset = (torch.arange(n_batch * channels, dtype=torch.int64) * stride).reshape(
        [n_batch, channels] + [1] * win.n)
    return y, flat + offset


def _unravel(idx: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    """Row-major flat spatial index -> one coordinate tensor per spatial dim."""
    coords, rest = [], idx
    for size in reversed(sizes):
        coords.append(rest % size)
        rest = torch.div(rest, size, rounding_mode="floor")
    return coords[::-1]


@converter("AveragePool", since=1)
def average_pool(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x = inputs[0]
    win = _Windows(ctx, node, x)
    include_pad = bool(node.attrs.get("count_include_pad", 0))
    if win.native_ok() and all(d == 1 for d in win.dilations):
        return _AVG[win.n](x, win.kernel, win.strides, win.begin, ceil_mode=win.ceil,
                           count_include_pad=include_pad)
    total = _window_sums(win, win.padded(x, 0.0))
    divisor = win.divisor(include_pad)
    # ORT leaves a window with nothing to count at 0 instead of dividing by 0
    scale = np.where(divisor > 0, 1.0 / np.maximum(divisor, 1), 0.0).astype(np.float32)
    return total * torch.from_numpy(scale).to(x.dtype)


def _window_sums(win: _Windows, xp: torch.Tensor) -> torch.Tensor:
    """Sum over each window of an already padded input (floor mode, no padding)."""
    if all(d == 1 for d in win.dilations):
        return _AVG[win.n](xp, win.kernel, win.strides, 0) * float(np.prod(win.kernel))
    # avg_pool has no dilation: a depthwise conv with a ones kernel sums the dilated taps
    channels = int(xp.shape[1])
    ones = torch.ones([channels, 1] + win.kernel, dtype=xp.dtype)
    return _CONV[win.n](xp, ones, None, stride=win.strides, dilation=win.dilations, groups=channels)


@converter("LpPool", since=1)
def lp_pool(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x = inputs[0]
    win = _Windows(ctx, node, x)
    p = float(node.attrs.get("p", 2))
    total = _window_sums(win, win.padded(x.abs().pow(p), 0.0))
    return total.pow(1.0 / p)


def _spatial_dims(node: OnnxNode, x: torch.Tensor) -> list[int]:
    if x.dim() < 3:
        raise UnsupportedNode(f"{node.op_type} {node.name!r}: input rank {x.dim()} < 3")
    return list(range(2, x.dim()))


@converter("GlobalAveragePool", since=1)
def global_average_pool(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x = inputs[0]
    if x.dim() == 4:
        return F.adaptive_avg_pool2d(x, 1)  # the form the XNNPACK quantizer annotates
    return x.mean(dim=_spatial_dims(node, x), keepdim=True)


@converter("GlobalMaxPool", since=1)
def global_max_pool(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x = inputs[0]
    return x.amax(dim=_spatial_dims(node, x), keepdim=True)


@converter("GlobalLpPool", since=1)
def global_lp_pool(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x = inputs[0]
    p = float(node.attrs.get("p", 2))
    return x.abs().pow(p).sum(dim=_spatial_dims(node, x), keepdim=True).pow(1.0 / p)
