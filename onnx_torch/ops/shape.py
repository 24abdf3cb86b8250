"""Shape and data movement (C1): Reshape (allowzero), Flatten, Squeeze/Unsqueeze (attribute < 13,
input >= 13), Transpose, Concat, Split (split attribute < 13, input >= 13, num_outputs >= 18),
Slice (attributes < 10, inputs >= 10), Gather, GatherElements, GatherND, Expand, Tile, Range,
ConstantOfShape, Constant, Identity, Dropout, Cast, CastLike, DepthToSpace, SpaceToDepth,
ScatterND, ScatterElements, Trilu, OneHot, EyeLike, ReverseSequence (constant lengths), Size/Shape
(only when not folded), NonZero (its count a SymInt: onnx_torch/data_sizes.py). (Hann/Hamming/BlackmanWindow of a static size are folded to
constants before any converter runs.)

Every static argument (a shape, axes, starts/ends, repeats) is read with ctx.const as numpy, so
the torch graph holds Python ints only; a run-time value there is an UnsupportedNode naming it.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .. import module as m
from ..data_sizes import is_symbolic
from ..registry import UnsupportedNode, converter
from ._common import const_ints, norm_axis, torch_dtype


@converter("Identity")
def identity(ctx, node, inputs):
    return inputs[0]


@converter("Dropout")
def dropout(ctx, node, inputs):

    x = inputs[0]
    outs = [x]
    if len(node.outputs) > 1 and node.outputs[1]:
        outs.append(torch.ones_like(x, dtype=torch.bool))
    return outs


@converter("Constant")
def constant(ctx, node, inputs):
    a = node.attrs
    if "value" in a:
        return m.to_torch(np.asarray(a["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in a:
            return m.to_torch(np.asarray(a[key], dtype=dtype))
    raise UnsupportedNode(f"Constant with {sorted(a)}")


@converter("ConstantOfShape")
def constant_of_shape(ctx, node, inputs):

    shape = const_ints(ctx, node, 0, "shape") or []
    value = node.attr("value")
    fill = np.asarray(value).reshape(-1)[0] if value is not None else np.float32(0)
    if not any(is_symbolic(d) for d in shape) and np.prod(shape) < (1 << 16):
        return m.to_torch(np.full(shape, fill, dtype=np.asarray(fill).dtype))
    return torch.full(shape, fill.item(), dtype=m.to_torch(np.asarray(fill)).dtype)


@converter("Cast")
def cast(ctx, node, inputs):

    to = torch_dtype(node.attr("to"))
    x = inputs[0]
    if x.is_floating_point() and not to.is_floating_point and to != torch.bool:
        x = torch.trunc(x)  # ONNX float->int cast truncates toward zero
    return x.to(to)


@converter("CastLike")
def cast_like(ctx, node, inputs):
    return inputs[0].to(inputs[1].dtype)


def _reshape_target(shape: list[int], in_shape: list[int], allowzero: bool) -> list[int]:
    out = []
    for i, d in enumerate(shape):
        if isinstance(d, int) and d == 0 and not allowzero:
            out.append(in_shape[i])
        else:
            out.append(d)
    return out


@converter("Reshape", since=5)
def reshape(ctx, node, inputs):
    x = inputs[0]
    shape = const_ints(ctx, node, 1, "shape")
    return x.reshape(_reshape_target(shape, list(x.shape), bool(node.attr("allowzero", 0))))


@converter("Reshape", until=4)
def reshape_attr(ctx, node, inputs):
    x = inputs[0]
    return x.reshape(_reshape_target(list(node.attr("shape")), list(x.shape), False))


@converter("Flatten")
def flatten(ctx, node, inputs):
    x = inputs[0]
    axis = norm_axis(int(node.attr("axis", 1)), x.dim())
    # math.prod keeps a data-sized dim symbolic, and an explicit size needs no test of the count for 0
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _axes(ctx, node, opset_input: int):
    # The input form below its opset too: onnxscript 0.7.2's optimizer (which folds the converter's
    # copy) rewrites ConcatFromSequence into Unsqueeze(x, axes) + Concat whatever the file's opset.
    given_as_input = node.attr("axes") is None and len(node.inputs) > 1 and bool(node.inputs[1])
    if ctx.opset >= opset_input or given_as_input:
        return const_ints(ctx, node, 1, "axes")
    a = node.attr("axes")
    return list(a) if a is not None else None


@converter("Squeeze")
def squeeze(ctx, node, inputs):
    x = inputs[0]
    axes = _axes(ctx, node, 13)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted(norm_axis(a, x.dim()) for a in axes)
    shape = [d for i, d in enumerate(x.shape) if i not in axes]
    return x.reshape(shape)


@converter("Unsqueeze")
def unsqueeze(ctx, node, inputs):
    x = inputs[0]
    axes = _axes(ctx, node, 13)
    out_rank = x.dim() + len(axes)
    axes = sorted(norm_axis(a, out_rank) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return x.reshape(shape)


@converter("Transpose")
def transpose(ctx, node, inputs):
    x = inputs[0]
    perm = node.attr("perm")
    if perm is None:
        perm = list(range(x.dim()))[::-1]
    return x.permute(*[int(p) for p in perm])


def _is_zero(d) -> bool:
    return not is_symbolic(d) and d == 0


@converter("Concat")
def concat(ctx, node, inputs):

    xs = [x for x in inputs if x is not None]
    axis = int(node.attr("axis", 0))
    rank = max(x.dim() for x in xs)
    # an empty operand (a number 0: a data-sized dim is never tested, torch.cat takes it as it is)
    xs = [x for x in xs if not (x.dim() == rank and _is_zero(x.shape[norm_axis(axis, rank)]))] or xs[:1]
    dtype = xs[0].dtype
    return torch.cat([x.to(dtype) for x in xs], dim=axis)


@converter("Split")
def split(ctx, node, inputs):

    x = inputs[0]
    axis = norm_axis(int(node.attr("axis", 0)), x.dim())
    if ctx.opset >= 13:
        sizes = const_ints(ctx, node, 1, "split")
    else:
        sizes = node.attr("split")
        sizes = list(sizes) if sizes is not None else None
    n_out = len(node.outputs)
    dim = x.shape[axis]
    if sizes is None:
        n = int(node.attr("num_outputs", n_out))
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    return list(torch.split(x, [int(s) for s in sizes], dim=axis))


@converter("Slice")
def slice_(ctx, node, inputs):
    x = inputs[0]
    if ctx.opset >= 10:
        starts = const_ints(ctx, node, 1, "starts")
        ends = const_ints(ctx, node, 2, "ends")
        axes = const_ints(ctx, node, 3, "axes")
        steps = const_ints(ctx, node, 4, "steps")
    else:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = node.attr("axes")
        axes = list(axes) if axes is not None else None
        steps = None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    index = [slice(None)] * x.dim()
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(a, x.dim())
        dim = x.shape[a]
        if st == 0:
            raise UnsupportedNode("Slice with step 0")
        # numpy-style clamping as the ONNX spec states
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            index[a] = slice(s, max(e, s), st)
        else:
            s, e = min(max(s, -1), dim - 1), min(max(e, -1), dim - 1)
            if s <= e:
                index[a] = slice(0, 0)
                continue
            # torch has no negative steps: take the positive slice then flip
            count = (s - e - 1) // (-st) + 1
            lo = s - (count - 1) * (-st)
            index[a] = slice(lo, s + 1, -st)
            flips.append(a)
    y = x[tuple(index)]
    if flips:
        y = y.flip(flips)
    return y


def _norm_indices(idx, dim: int, ctx, name: str):

    c = ctx.const(name)
    if c is not None:
        arr = np.asarray(c).astype(np.int64)
        if (arr < 0).any():
            return m.to_torch(np.where(arr < 0, arr + dim, arr))
        return idx.long()
    # remainder, not where(idx < 0, idx + dim, idx): prepare_pt2e turns the scalar of an add into a
    # float tensor attribute, which made the indices float (seen on a GRU encoder's embedding)
    return torch.remainder(idx.long(), dim)


@converter("Gather")
def gather(ctx, node, inputs):

    x, idx = inputs
    axis = norm_axis(int(node.attr("axis", 0)), x.dim())
    c = ctx.const(node.inputs[1])
    if c is not None and np.asarray(c).ndim == 0:
        return torch.select(x, axis, int(c) % x.shape[axis])
    idx = _norm_indices(idx, x.shape[axis], ctx, node.inputs[1])
    if idx.dim() == 0:
        return torch.index_select(x, axis, idx.reshape(1)).squeeze(axis)
    if axis == 0 and x.dim() == 2 and x.is_floating_point():
        return torch.nn.functional.embedding(idx, x)
    flat = torch.index_select(x, axis, idx.reshape(-1))
    return flat.reshape(list(x.shape[:axis]) + list(idx.shape) + list(x.shape[axis + 1:]))


@converter("GatherElements")
def gather_elements(ctx, node, inputs):

    x, idx = inputs
    axis = norm_axis(int(node.attr("axis", 0)), x.dim())
    return torch.gather(x, axis, _norm_indices(idx, x.shape[axis], ctx, node.inputs[1]))


@converter("GatherND")
def gather_nd(ctx, node, inputs):
    x, idx = inputs
    b = int(node.attr("batch_dims", 0))
    if b != 0:
        raise UnsupportedNode("GatherND batch_dims != 0")
    k = idx.shape[-1]
    idx = idx.long()
    lead = list(idx.shape[:-1])
    flat = idx.reshape(-1, k)
    parts = tuple(flat[:, i] for i in range(k))
    return x[parts].reshape(lead + list(x.shape[k:]))


@converter("Expand")
def expand(ctx, node, inputs):
    x = inputs[0]
    shape = const_ints(ctx, node, 1, "shape")
    out = _broadcast(list(x.shape), shape)
    if len(out) > x.dim():
        x = x.reshape([1] * (len(out) - x.dim()) + list(x.shape))
    return x.expand(out)


def _broadcast(a: list, b: list) -> list:
    """numpy's broadcast of two shapes where a dim may be a SymInt: a number 1 takes the other's dim; two dims
    that are not 1 are the same size (torch checks it at run time)."""
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + list(a), [1] * (n - len(b)) + list(b)
    out = []
    for x, y in zip(a, b):
        if not is_symbolic(x) and x == 1:
            out.append(y)
        elif not is_symbolic(y) and y == 1:
            out.append(x)
        else:
            out.append(x if is_symbolic(x) else y)
    return out


@converter("Tile")
def tile(ctx, node, inputs):
    reps = const_ints(ctx, node, 1, "repeats")
    return inputs[0].repeat(*reps)


@converter("Range")
def range_(ctx, node, inputs):

    vals = [ctx.const(n) for n in node.inputs]
    if any(v is None for v in vals):
        raise UnsupportedNode("Range with a start/limit/delta computed at run time")
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in vals)
    if any(is_symbolic(v) for v in (start, limit, delta)):  # a data-sized count: torch.arange carries it
        return torch.arange(start, limit, delta, dtype=torch.int64)
    start, limit, delta = (np.asarray(v).item() for v in vals)
    dtype = np.asarray(vals[0]).dtype
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return m.to_torch((start + np.arange(n) * delta).astype(dtype))


@converter("DepthToSpace")
def depth_to_space(ctx, node, inputs):

    x = inputs[0]
    b = int(node.attr("blocksize"))
    if node.attr("mode", "DCR") == "CRD":
        return F.pixel_shuffle(x, b)
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


@converter("SpaceToDepth")
def space_to_depth(ctx, node, inputs):
    x = inputs[0]
    b = int(node.attr("blocksize"))
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@converter("ScatterND")
def scatter_nd(ctx, node, inputs):
    x, idx, upd = inputs
    if node.attr("reduction", "none") != "none":
        raise UnsupportedNode(f"ScatterND reduction={node.attr('reduction')}")
    k = idx.shape[-1]
    flat = idx.long().reshape(-1, k)
    parts = tuple(flat[:, i] for i in range(k))
    out = x.clone()
    out[parts] = upd.reshape([flat.shape[0]] + list(x.shape[k:]))
    return out


@converter("Scatter", until=10)  # opset 9-10's name for ScatterElements (deprecated at 11)
@converter("ScatterElements")
def scatter_elements(ctx, node, inputs):
    x, idx, upd = inputs
    axis = norm_axis(int(node.attr("axis", 0)), x.dim())
    red = node.attr("reduction", "none")
    idx = _norm_indices(idx, x.shape[axis], ctx, node.inputs[1])
    if red == "none":
        return x.scatter(axis, idx, upd)
    reduce = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}.get(red)
    if reduce is None:
        raise UnsupportedNode(f"ScatterElements reduction={red}")
    return x.scatter_reduce(axis, idx, upd, reduce=reduce)


@converter("Trilu")
def trilu(ctx, node, inputs):

    k = const_ints(ctx, node, 1, "k")
    k = k[0] if k else 0
    return torch.triu(inputs[0], k) if node.attr("upper", 1) else torch.tril(inputs[0], k)


@converter("OneHot")
def one_hot(ctx, node, inputs):

    idx, depth, values = inputs
    d = const_ints(ctx, node, 1, "depth")[0]
    axis = int(node.attr("axis", -1))
    idx = torch.remainder(idx.long(), d)
    oh = torch.nn.functional.one_hot(idx, d)
    if axis != -1:
        oh = oh.movedim(-1, norm_axis(axis, oh.dim()))
    off, on = values[0], values[1]
    return torch.where(oh.bool(), on, off)


@converter("EyeLike")
def eye_like(ctx, node, inputs):
    x = inputs[0]
    if x.dim() != 2:
        raise UnsupportedNode(f"EyeLike on a {x.dim()}-D input")
    dtype = node.attr("dtype")
    eye = np.eye(x.shape[0], x.shape[1], int(node.attr("k", 0)))
    out = m.to_torch(eye)
    return out.to(torch_dtype(dtype) if dtype is not None else x.dtype)


@converter("ReverseSequence")
def reverse_sequence(ctx, node, inputs):
    """Each batch row's first ``sequence_lens[b]`` steps reversed, the rest kept: one gather along time."""

    x = inputs[0]
    lens = const_ints(ctx, node, 1, "sequence_lens")
    t_axis, b_axis = int(node.attr("time_axis", 0)), int(node.attr("batch_axis", 1))
    steps = x.shape[t_axis]
    index = np.tile(np.arange(steps)[:, None], (1, len(lens)))
    for b, n in enumerate(lens):
        n = min(max(int(n), 0), steps)
        index[:n, b] = np.arange(n)[::-1]
    view = [1] * x.dim()
    view[t_axis], view[b_axis] = steps, len(lens)
    order = (0, 1) if t_axis < b_axis else (1, 0)
    index = m.to_torch(np.ascontiguousarray(index.transpose(order)).reshape(view))
    return torch.gather(x, t_axis, index.expand(x.shape))


@converter("Shape")
def shape(ctx, node, inputs):
    s = list(inputs[0].shape)
    return m.to_torch(np.array(s[slice(node.attr("start", 0), node.attr("end", len(s)))], dtype=np.int64))


@converter("Size")
def size(ctx, node, inputs):
    return m.to_torch(np.array(int(inputs[0].numel()), dtype=np.int64))


@converter("NonZero")
def non_zero(ctx, node, inputs):
    """[rank, count] of int64 indices in row-major order, as torch.nonzero's rows: torch.export gives the count an
    unbacked symbol, and the module carries it to the nodes that read the output's size (data_sizes.py)."""

    return torch.nonzero(inputs[0]).t()
