"""Resize (opsets 10..19+), Upsample (7..9), Pad (2..19+, every mode) and GridSample -> static torch ops.

Resize is separable: along each resized axis, output position x reads a few input positions
(1 for nearest, 2 for linear, 4 for cubic) with fixed weights. Those index/weight tables depend only
on static sizes and attributes, so they are computed here, in numpy float32 exactly as ORT's CPU
kernel computes them (upsamplebase.h: GetOriginalCoordinateFromResizedCoordinate,
GetNearestPixelFromOriginal; upsample.cc: the linear/cubic setup), and the torch graph is only
``index_select`` + multiply-add with constant tables - any mode combination, bit-faithful
coordinates. Where torch has an op with exactly the same tables, that op is emitted instead
(aten.upsample_nearest2d for an exact 2x nearest, aten.upsample_bilinear2d/linear1d/trilinear3d
for half_pixel / pytorch_half_pixel / align_corners linear), which is what PT2E and XNNPACK know.

Pad: constant mode is F.pad (aten.constant_pad_nd, negative pads crop); reflect / edge are F.pad too
where torch's reflection/replication pads compute the same (the last 1-3 axes, no negative pads);
the rest, and wrap, are an ``index_select`` per padded axis with a constant index table, which covers
every axis and negative pads alike.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..registry import ConvertContext, OnnxNode, UnsupportedNode, converter
from ._spatial import text

f32 = np.float32


# ----------------------------------------------------------------------------- Resize tables
def _original_coords(mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float],
                     from_sizes: bool = False) -> np.ndarray:
    """ORT's GetOriginalCoordinateFromResizedCoordinate for every output position, in float32.

    from_sizes: the scale is out/in from a ``sizes`` input. For ``asymmetric`` ORT 1.32 then lands
    on the exact ratio (7 -> 4: output 2 reads 2 * 7/4 = 3.5, where float32 2 / (4/7) gives
    3.4999998); for the half-pixel modes it computes in float32 with the float32 scale. Measured on
    every in/out pair 2..13 where the two differ (test_resize_from_sizes_*)."""
    if from_sizes and mode == "asymmetric":
        return (np.arange(out_len, dtype=np.float64) * (in_len / out_len)).astype(f32)
    x = np.arange(out_len, dtype=f32)
    s, lr, lo = f32(scale), f32(out_len), f32(in_len)
    half = f32(0.5)
    if mode == "asymmetric":
        return x / s
    if mode == "pytorch_half_pixel":
        return (x + half) / s - half if out_len > 1 else np.zeros_like(x)
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / s
    if mode == "align_corners":
        return np.zeros_like(x) if out_len == 1 else x * (lo - f32(1)) / (lr - f32(1))
    if mode == "tf_crop_and_resize":
        start, end = f32(roi[0]), f32(roi[1])
        if out_len > 1:
            return (start * (lo - 1) + (x * (end - start) * (lo - 1)) / (lr - 1)).astype(f32)
        return np.full_like(x, f32(0.5 * (float(start) + float(end)) * (in_len - 1)))
    if mode == "half_pixel_symmetric":
        adjustment = lr / (s * lo)
        offset = f32(lo / f32(2)) * (f32(1) - adjustment)
        # ORT adds the double constant 0.5 here: the sum is computed in double, then cast
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(f32)
    if mode == "half_pixel":
        return (x + half) / s - half
    raise UnsupportedNode(f"coordinate_transformation_mode={mode!r}")


def _nearest_index(orig: np.ndarray, nearest_mode: str, scale: float) -> np.ndarray:
    """ORT's GetNearestPixelFromOriginal (SIMPLE is the opset <= 10 rule)."""
    if nearest_mode == "simple":
        return np.ceil(orig) if scale < 1 else np.trunc(orig)
    # std::round: halves away from zero (in float64, where adding 0.5 is exact)
    wide = orig.astype(np.float64)
    rounded = np.sign(wide) * np.floor(np.abs(wide) + 0.5)
    if nearest_mode == "round_prefer_ceil":
        return rounded
    if nearest_mode == "floor":
        return np.floor(orig)
    if nearest_mode == "ceil":
        return np.ceil(orig)
    if nearest_mode == "round_prefer_floor":
        # ORT: x == (int64)x + 0.5f, the cast truncating toward zero
        halfway = orig == np.trunc(orig) + f32(0.5)
        return np.where(halfway, np.floor(orig), rounded)
    raise UnsupportedNode(f"nearest_mode={nearest_mode!r}")


def _cubic_coeffs(s: np.ndarray, a: float) -> np.ndarray:
    """ORT's GetCubicCoeffs: weights of taps floor(x)-1 .. floor(x)+2 for fraction s, shape [n, 4]."""
    a = f32(a)
    s = s.astype(f32)
    one = f32(1)
    c0 = ((a * (s + one) - f32(5) * a) * (s + one) + f32(8) * a) * (s + one) - f32(4) * a
    c1 = ((a + f32(2)) * s - (a + f32(3))) * s * s + one
    c2 = ((a + f32(2)) * (one - s) - (a + f32(3))) * (one - s) * (one - s) + one
    c3 = ((a * (f32(2) - s) - f32(5) * a) * (f32(2) - s) + f32(8) * a) * (f32(2) - s) - f32(4) * a
    return np.stack([c0, c1, c2, c3], axis=1)


class _AxisTable:
    """Along one axis: out position -> (input indices [out, taps], weights [out, taps], outside mask)."""

    def __init__(self, index: np.ndarray, weight: np.ndarray, outside: np.ndarray):
        self.index, self.weight, self.outside = index.astype(np.int64), weight.astype(f32), outside


def _axis_table(mode: str, coord: str, nearest: str, in_len: int, out_len: int, scale: float,
                roi: tuple[float, float], cubic_a: float, exclude_outside: bool,
                from_sizes: bool = False) -> _AxisTable:
    orig = _original_coords(coord, out_len, in_len, scale, roi, from_sizes)
    extrapolate = coord == "tf_crop_and_resize"
    outside = (orig < 0) | (orig > f32(in_len - 1)) if extrapolate else np.zeros(out_len, bool)
    if mode == "nearest":
        idx = np.clip(_nearest_index(orig, nearest, scale), 0, in_len - 1)
        return _AxisTable(idx[:, None], np.ones((out_len, 1), f32), outside)
    if mode == "linear":
        o = np.clip(orig, f32(0), f32(in_len - 1))
        i1 = np.minimum(o.astype(np.int64), in_len - 1)
        i2 = np.minimum(i1 + 1, in_len - 1)
        d1, d2 = np.abs(o - i1.astype(f32)), np.abs(o - i2.astype(f32))
        same = i1 == i2
        d1, d2 = np.where(same, f32(0.5), d1), np.where(same, f32(0.5), d2)
        return _AxisTable(np.stack([i1, i2], 1), np.stack([d2, d1], 1), outside)
    if mode == "cubic":
        base = np.floor(orig).astype(np.int64)
        taps = base[:, None] + np.arange(-1, 3)[None, :]
        w = _cubic_coeffs(orig - base.astype(f32), cubic_a)
        inside = (taps >= 0) & (taps < in_len)
        if exclude_outside:
            w = np.where(inside, w, f32(0))
            w = w / w.sum(axis=1, keepdims=True)
        return _AxisTable(np.clip(taps, 0, in_len - 1), w, outside)
    raise UnsupportedNode(f"mode={mode!r}")


def _antialias_table(mode: str, coord: str, in_len: int, out_len: int, scale: float, roi: tuple[float, float],
                     cubic_a: float, exclude_outside: bool, from_sizes: bool = False) -> _AxisTable:
    """ORT's antialiased filter along one axis (upsample_antialias.h SetupUpsampleFilterAntiAlias):
    a triangle (linear) or Keys cubic filter stretched by 1/scale when downsampling, its taps cut
    at the borders (exclude_outside) or folded onto the edge pixels, normalized; in float32."""
    a = f32(cubic_a)

    def filt(x: f32) -> f32:
        x = abs(x)
        if mode == "linear":
            return f32(1) - x if x < 1 else f32(0)
        if x < 1:
            return ((a + f32(2)) * x - (a + f32(3))) * x * x + f32(1)
        if x < 2:
            return (((x - f32(5)) * x + f32(8)) * x - f32(4)) * a
        return f32(0)

    support_size = f32(2.0 if mode == "linear" else 4.0)
    s = f32(1) / f32(scale)
    support = (support_size * f32(0.5)) * s if s >= 1 else support_size * f32(0.5)
    window = int(np.ceil(support)) * 2 + 1
    inv_scale = f32(1) / s if s >= 1 else f32(1)
    orig = _original_coords(coord, out_len, in_len, scale, roi, from_sizes)
    index = np.zeros((out_len, window), np.int64)
    weight = np.zeros((out_len, window), f32)
    for i in range(out_len):
        center = f32(0.5) + (f32(i) if s == 1 else orig[i])
        xmin_real = int(np.floor(center - support + f32(0.5)))
        xmax_real = int(np.floor(center + support + f32(0.5)))
        xmax_real = xmin_real + min(max(xmax_real - xmin_real, 0), window)
        xmin_cut, xmax_cut = min(max(xmin_real, 0), in_len), min(max(xmax_real, 0), in_len)
        xmin, xmax = (xmin_cut, xmax_cut) if exclude_outside else (xmin_real, xmax_real)
        buf = np.zeros(window, f32)
        total = f32(0)
        xmax -= xmin
        for x in range(xmax):
            w = filt((f32(x + xmin) - center + f32(0.5)) * inv_scale)
            buf[x] = w
            total = f32(total + w)
        if not exclude_outside and xmin_cut < xmax_cut:
            neg = min(max(-xmin, 0), xmax - 1)
            for x in range(neg):
                buf[neg] += buf[x]
            bound = min(max(xmax + xmin - in_len, 0), xmax - 1)
            for x in range(xmax - bound, xmax):
                buf[xmax - bound - 1] += buf[x]
            if neg or bound:
                for x in range(xmax_cut - xmin_cut):
                    buf[x] = buf[x + neg]
        inv = f32(1) if total == 0 else f32(1) / total
        n = xmax_cut - xmin_cut
        index[i, :n] = np.arange(xmin_cut, xmax_cut)
        weight[i, :n] = buf[:n] * inv
        index[i, n:] = max(xmin_cut, 0) if n else 0  # zero-weight taps read any valid position
    return _AxisTable(np.clip(index, 0, in_len - 1), weight, np.zeros(out_len, bool))


def _apply_table(x: torch.Tensor, axis: int, table: _AxisTable, extrapolation: float) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[axis] = -1
    y = None
    for t in range(table.index.shape[1]):
        picked = x.index_select(axis, torch.from_numpy(table.index[:, t].copy()))
        w = table.weight[:, t]
        if table.index.shape[1] > 1 or not np.all(w == 1):
            picked = picked * torch.from_numpy(w.copy()).reshape(shape).to(x.dtype)
        y = picked if y is None else y + picked
    if table.outside.any():
        mask = torch.from_numpy(table.outside.copy()).reshape(shape)
        y = torch.where(mask, torch.tensor(extrapolation, dtype=x.dtype), y)
    return y


def _static_shape(ctx: ConvertContext, name: str, x: torch.Tensor) -> list[int]:
    """The input's static shape: from shape inference, else from the (statically shaped) tensor."""
    shape = ctx.shape(name)
    if shape is None or len(shape) != x.dim() or any(not isinstance(d, int) or d < 0 for d in shape):
        shape = tuple(x.shape)
    return [int(d) for d in shape]


# ----------------------------------------------------------------------------- Resize / Upsample
class _ResizePlan:
    """A Resize/Upsample node's static decisions: per-axis scales and output sizes, modes."""

    def __init__(self, ctx: ConvertContext, node: OnnxNode, x: torch.Tensor, *, legacy: bool):
        self.node = node
        self.in_shape = _static_shape(ctx, node.inputs[0], x)
        rank = len(self.in_shape)
        attrs = node.attrs
        self.mode = text(attrs.get("mode"), "nearest")
        # Before opset 11 the only transform is asymmetric and nearest uses ORT's SIMPLE rule
        self.coord = "asymmetric" if legacy else text(attrs.get("coordinate_transformation_mode"), "half_pixel")
        self.nearest = "simple" if legacy else text(attrs.get("nearest_mode"), "round_prefer_floor")
        self.cubic_a = float(attrs.get("cubic_coeff_a", -0.75))
        self.exclude_outside = bool(attrs.get("exclude_outside", 0))
        self.extrapolation = float(attrs.get("extrapolation_value", 0.0))
        self.antialias = bool(int(attrs.get("antialias", 0)))
        if self.antialias and (self.mode == "nearest" or self.coord == "tf_crop_and_resize"):
            raise UnsupportedNode(f"Resize {node.name!r}: antialias=1 with mode={self.mode}, "
                                  f"coordinate_transformation_mode={self.coord}")
        axes = [int(a) % rank for a in attrs.get("axes", [])] or list(range(rank))
        roi, scales, sizes = self._inputs(ctx, node, legacy)
        self.roi = [(0.0, 1.0)] * rank
        if roi is not None and roi.size:
            roi = roi.astype(np.float32).ravel()
            k = len(roi) // 2
            for j, a in enumerate(axes if k == len(axes) else range(k)):
                self.roi[a] = (float(roi[j]), float(roi[k + j]))
        elif self.coord == "tf_crop_and_resize":
            raise UnsupportedNode(f"Resize {node.name!r}: tf_crop_and_resize without a constant roi")
        self.scales = [1.0] * rank
        self.out = list(self.in_shape)
        self.from_sizes = False  # every scale is exactly out/in (see _original_coords)
        if sizes is not None and sizes.size:
            sizes = [int(v) for v in sizes.ravel()]
            targets = dict(zip(axes if len(sizes) == len(axes) else range(rank), sizes))
            for a, size in targets.items():
                self.out[a] = size
                self.scales[a] = float(f32(size) / f32(self.in_shape[a])) if self.in_shape[a] else 1.0
            policy = text(attrs.get("keep_aspect_ratio_policy"), "stretch")
            self.from_sizes = policy == "stretch"
            self._aspect_policy(policy, list(targets))
        elif scales is not None and scales.size:
            scales = [float(f32(v)) for v in scales.ravel()]
            for a, s in zip(axes if len(scales) == len(axes) else range(rank), scales):
                self.scales[a] = s
                self.out[a] = int(f32(s) * f32(self.in_shape[a]))  # ORT: static_cast<int64_t>(scale * dim)
        else:
            raise UnsupportedNode(f"{node.op_type} {node.name!r}: neither scales nor sizes is a constant")

    def _inputs(self, ctx: ConvertContext, node: OnnxNode, legacy: bool):
        def const(i: int):
            if len(node.inputs) <= i or not node.inputs[i]:
                return None
            value = ctx.const(node.inputs[i])
            if value is None:
                raise UnsupportedNode(f"{node.op_type} {node.name!r}: input {i} ({node.inputs[i]!r}) is not a "
                                      "constant after folding")
            return np.asarray(value)

        if node.op_type == "Upsample" and "scales" in node.attrs:  # opset 7-8
            return None, np.asarray(node.attrs["scales"], np.float32), None
        if legacy:  # Resize-10, Upsample-9: (X, scales)
            return None, const(1), None
        roi = const(1) if self.coord == "tf_crop_and_resize" else None
        return roi, const(2), const(3)

    def _aspect_policy(self, policy: str, axes: list[int]) -> None:
        if policy == "stretch":
            return
        chosen = [self.scales[a] for a in axes]
        scale = min(chosen) if policy == "not_larger" else max(chosen)
        for a in axes:
            self.scales[a] = scale
            self.out[a] = int(np.round(f32(scale) * f32(self.in_shape[a])))

    def resized_axes(self) -> list[int]:
        # ORT maps an axis with scale exactly 1 one-to-one, whatever the coordinate transform
        return [a for a in range(len(self.in_shape)) if self.scales[a] != 1.0 or self.out[a] != self.in_shape[a]]

    def native(self, x: torch.Tensor) -> torch.Tensor | None:
        """The aten upsample op with exactly ORT's tables, when there is one."""
        axes = self.resized_axes()
        rank = x.dim()
        if not axes or axes[0] < 2 or rank not in (3, 4, 5) or not x.is_floating_point():
            return None
        if self.mode == "nearest":
            if all(self.out[a] == 2 * self.in_shape[a] for a in axes) and axes == list(range(2, rank)):
                table = [_axis_table("nearest", self.coord, self.nearest, self.in_shape[a], self.out[a],
                                     self.scales[a], self.roi[a], self.cubic_a, False, self.from_sizes)
                         for a in axes]
                # aten's 2x nearest reads input x // 2
                if all(np.array_equal(t.index[:, 0], np.arange(self.out[a]) // 2) for t, a in zip(table, axes)):
                    return F.interpolate(x, size=[self.out[a] for a in range(2, rank)], mode="nearest")
            return None
        if self.mode != "linear" or axes != list(range(2, rank)) or self.coord == "tf_crop_and_resize":
            return None
        torch_mode = {3: "linear", 4: "bilinear", 5: "trilinear"}[rank]
        size = [self.out[a] for a in axes]
        if self.coord == "align_corners":
            return F.interpolate(x, size=size, mode=torch_mode, align_corners=True)
        # aten (size given): src = (dst + 0.5) * in/out - 0.5, clamped at 0 - ORT's half_pixel when
        # ORT's scale is out/in exactly; pytorch_half_pixel differs only for an output of length 1.
        exact = all(f32(self.scales[a]) == f32(self.out[a]) / f32(self.in_shape[a]) for a in axes)
        if exact and (self.coord == "half_pixel" or (self.coord == "pytorch_half_pixel"
                                                     and all(self.out[a] > 1 for a in axes))):
            return F.interpolate(x, size=size, mode=torch_mode, align_corners=False)
        return None

    def run(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode != "nearest" and not x.is_floating_point():
            # ORT rounds and saturates integer interpolation in kernel-specific ways; not mirrored
            raise UnsupportedNode(f"{self.node.op_type} {self.node.name!r}: mode={self.mode} on {x.dtype} data")
        if any(o <= 0 for o in self.out):
            raise UnsupportedNode(f"{self.node.op_type} {self.node.name!r}: empty output {self.out}")
        if self.out == self.in_shape:
            # ORT copies the input when no dim changes size, whatever the scales, roi or modes
            # (pinned: test_resize_that_keeps_every_size_is_a_copy_in_ort)
            return x
        y = None if self.antialias else self.native(x)
        if y is not None:
            return y
        for a in reversed(self.resized_axes()):  # ORT filters the innermost axis first
            if self.antialias:
                if self.out[a] == self.in_shape[a]:
                    continue  # ORT's antialias kernels copy an axis whose size does not change
                table = _antialias_table(self.mode, self.coord, self.in_shape[a], self.out[a], self.scales[a],
                                         self.roi[a], self.cubic_a, self.exclude_outside, self.from_sizes)
                x = _apply_table(x, a, table, self.extrapolation)
                continue
            table = _axis_table(self.mode, self.coord, self.nearest, self.in_shape[a], self.out[a],
                                self.scales[a], self.roi[a], self.cubic_a, self.exclude_outside, self.from_sizes)
            x = _apply_table(x, a, table, self.extrapolation)
        return x


@converter("Resize", since=10, until=10)
def resize_10(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    return _ResizePlan(ctx, node, inputs[0], legacy=True).run(inputs[0])


@converter("Resize", since=11)
def resize(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    return _ResizePlan(ctx, node, inputs[0], legacy=False).run(inputs[0])


@converter("Upsample", since=7, until=9)
def upsample(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    return _ResizePlan(ctx, node, inputs[0], legacy=True).run(inputs[0])


# ----------------------------------------------------------------------------- Pad
def _pad_index(mode: str, size: int, begin: int, end: int) -> np.ndarray:
    """Input positions read by output positions -begin .. size+end-1 along one axis."""
    j = np.arange(-begin, size + end)
    if mode == "edge":
        return np.clip(j, 0, size - 1)
    if mode == "wrap":
        return np.mod(j, size)
    if mode == "reflect":
        if size == 1:
            return np.zeros_like(j)
        period = 2 * (size - 1)
        m = np.mod(j, period)
        return np.where(m > size - 1, period - m, m)
    raise UnsupportedNode(f"Pad mode={mode!r}")


def _pad_spec(ctx: ConvertContext, node: OnnxNode, rank: int) -> tuple[list[int], list[int]]:
    """(begin, end) per axis of the input, from the attribute (opset < 11) or the inputs (+ axes, 18)."""
    if "pads" in node.attrs:
        pads = [int(p) for p in node.attrs["pads"]]
        axes = list(range(rank))
    else:
        value = ctx.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        if value is None:
            raise UnsupportedNode(f"Pad {node.name!r}: pads ({node.inputs[1] if len(node.inputs) > 1 else ''!r}) "
                                  "is not a constant after folding")
        pads = [int(p) for p in np.asarray(value).ravel()]
        axes_value = ctx.const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
        if len(node.inputs) > 3 and node.inputs[3] and axes_value is None:
            raise UnsupportedNode(f"Pad {node.name!r}: axes is not a constant")
        axes = [int(a) % rank for a in np.asarray(axes_value).ravel()] if axes_value is not None else list(range(rank))
    k = len(axes)
    if len(pads) != 2 * k:
        raise UnsupportedNode(f"Pad {node.name!r}: {len(pads)} pads for {k} axes")
    begin, end = [0] * rank, [0] * rank
    for j, a in enumerate(axes):
        begin[a], end[a] = pads[j], pads[k + j]
    return begin, end


@converter("Pad", since=1)
def pad(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]) -> torch.Tensor:
    x = inputs[0]
    rank = x.dim()
    begin, end = _pad_spec(ctx, node, rank)
    mode = text(node.attrs.get("mode"), "constant")
    shape = _static_shape(ctx, node.inputs[0], x)
    if mode == "constant" and any(min(begin[a], 0) + min(end[a], 0) < -shape[a] for a in range(rank)):
        return _pad_constant_by_index(ctx, node, inputs, x, shape, begin, end)
    if mode == "constant":
        torch_pads: list[int] = []
        for a in reversed(range(rank)):
            torch_pads += [begin[a], end[a]]
        value, value_tensor = _constant_value(ctx, node, inputs)
        if value_tensor is None:
            return F.pad(x, torch_pads, value=value)
        # a value only known at run time: pad with 0, then add value on the padded positions only
        mask = F.pad(torch.zeros([int(d) for d in x.shape], dtype=x.dtype), torch_pads, value=1)
        return F.pad(x, torch_pads, value=0) + mask * value_tensor.to(x.dtype).reshape(())
    torch_pads = _torch_pad_spec(mode, shape, begin, end)
    if torch_pads is not None:
        return F.pad(x, torch_pads, mode=_TORCH_PAD_MODES[mode])
    for a in range(rank):
        if begin[a] or end[a]:
            # ORT crops the negative sides first and pads the rest from what is left (a wrap
            # after a crop repeats the cropped extent, not the original one)
            lo, hi = max(0, -begin[a]), int(shape[a]) - max(0, -end[a])
            if hi <= lo:
                raise UnsupportedNode(f"Pad {node.name!r}: mode={mode} with pads that crop axis {a} away")
            index = lo + _pad_index(mode, hi - lo, max(0, begin[a]), max(0, end[a]))
            x = x.index_select(a, torch.from_numpy(index.astype(np.int64)))
    return x


# ONNX Pad modes torch pads the same way: aten.pad, which torch.onnx writes back as one Pad of that mode
# (the index tables below are a constant as long as the padded axis: 3.8 MB for a 30 s audio reflect pad).
_TORCH_PAD_MODES = {"reflect": "reflect", "edge": "replicate"}


def _torch_pad_spec(mode: str, shape, begin: list[int], end: list[int]) -> list[int] | None:
    """F.pad's pad list (last axis first) when torch's reflection/replication pad computes exactly this
    Pad, else None: no negative pads, the padded axes among the last 1-3 with one or two axes before
    them (aten's reflection_pad{1,2,3}d take 2-3, 3-4, 4-5 dims), and for reflect each pad below its
    axis's size (torch refuses more; ORT's reflect is the same mirror without the edge repeated)."""
    rank = len(shape)
    if mode not in _TORCH_PAD_MODES or min(begin + end) < 0:
        return None
    padded = [a for a in range(rank) if begin[a] or end[a]]
    if not padded:
        return None
    k = max(rank - padded[0], rank - 2)  # the trailing axes F.pad's list covers
    if k > min(3, rank - 1):
        return None
    for a in padded:
        if int(shape[a]) == 0 or (mode == "reflect" and max(begin[a], end[a]) >= int(shape[a])):
            return None
    return [p for a in reversed(range(rank - k, rank)) for p in (begin[a], end[a])]


def _pad_constant_by_index(ctx, node, inputs, x, shape, begin, end) -> torch.Tensor:
    """Constant pad whose negative pads cut more than an axis holds (aten's constant_pad_nd refuses):
    per axis, output position j reads input j when 0 <= j < size, else the constant value."""
    value, value_tensor = _constant_value(ctx, node, inputs)
    fill = value_tensor.to(x.dtype).reshape(()) if value_tensor is not None else torch.tensor(value, dtype=x.dtype)
    for a in range(x.dim()):
        if not (begin[a] or end[a]):
            continue
        j = np.arange(-begin[a], shape[a] + end[a])
        inside = (j >= 0) & (j < shape[a])
        if shape[a] == 0:
            new_shape = list(x.shape)
            new_shape[a] = len(j)
            x = fill.expand(new_shape).clone()
            continue
        x = x.index_select(a, torch.from_numpy(np.clip(j, 0, shape[a] - 1).astype(np.int64)))
        mask_shape = [1] * x.dim()
        mask_shape[a] = -1
        x = torch.where(torch.from_numpy(inside.copy()).reshape(mask_shape), x, fill)
    return x


def _constant_value(ctx: ConvertContext, node: OnnxNode, inputs) -> tuple[float | int, torch.Tensor | None]:
    if "value" in node.attrs:  # opset < 11
        return float(node.attrs["value"]), None
    if len(node.inputs) < 3 or not node.inputs[2]:
        return 0, None
    value = ctx.const(node.inputs[2])
    if value is None:
        return 0, inputs[2]
    value = np.asarray(value).ravel()
    if value.size == 0:
        return 0, None
    v = value[0]
    return (int(v) if np.issubdtype(value.dtype, np.integer) or value.dtype == bool else float(v)), None


# GridSample's modes as ONNX spells them (opset 16: bilinear/bicubic; 20+: linear/cubic) -> torch's.
_GRID_MODES = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest", "bicubic": "bicubic",
               "cubic": "bicubic"}


@converter("GridSample", since=16)
def grid_sample(ctx: ConvertContext, node: OnnxNode, inputs):
    """F.grid_sample: the same sampling (grid in [-1, 1], x then y), align_corners and padding modes;
    torch has 2-D (any mode) and 3-D (no cubic) only."""
    x, grid = inputs[0], inputs[1]
    mode = _GRID_MODES.get(text(node.attrs.get("mode"), "linear" if ctx.opset >= 20 else "bilinear"))
    padding = text(node.attrs.get("padding_mode"), "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise UnsupportedNode(f"GridSample mode={text(node.attrs.get('mode'))} padding_mode={padding}")
    if x.dim() not in (4, 5) or (x.dim() == 5 and mode == "bicubic"):
        raise UnsupportedNode(f"GridSample on a {x.dim()}-D input with mode {mode}")
    return F.grid_sample(x, grid, mode=mode, padding_mode=padding,
                         align_corners=bool(node.attrs.get("align_corners", 0)))
