"""MatMul, Gemm, Einsum, Attention (opset 23), MatMulInteger, QuantizeLinear/DequantizeLinear, STFT and DFT (C1).

A constant 2-D right operand becomes ``F.linear``'s weight (PT2E's XNNPACK quantizer annotates
linear, not matmul, with a per-channel weight): ``MatMul(x, W[K, N])`` is ``linear(x, W.T)``. The
transpose is of a weight parameter, so convert_pt2e folds it into the quantized constant.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..registry import FUSED_DOMAIN, UnsupportedNode, converter
from ._common import norm_axis


def _is_weight(ctx, name: str) -> bool:
    c = ctx.const(name)
    return c is not None and c.ndim == 2 and c.dtype.kind == "f"


@converter("MatMul")
def matmul(ctx, node, inputs):

    a, b = inputs
    if _is_weight(ctx, node.inputs[1]) and a.dim() >= 1 and a.is_floating_point():
        return F.linear(a, b.t())
    return torch.matmul(a, b)




@converter("MatMulAdd", domain=FUSED_DOMAIN)
def matmul_add(ctx, node, inputs):
    """MatMul(x, W[K, N]) then Add(bias[N]): one ``F.linear`` with its bias, as torch's own Linear is.
    Two ops left the bias to a separate add, which PT2E's XNNPACK quantizer quantizes as an int8
    activation (a constant operand, per tensor) between two requantizations: 2.2 dB of SQNR lost on a
    3-layer MLP where the same weights written as Gemm lost none (ORT: 37.3 dB either way)."""

    x, weight, bias = inputs
    return F.linear(x, weight.t(), bias)


@converter("Gemm")
def gemm(ctx, node, inputs):

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

    eq = node.attr("equation", "").replace(" ", "")
    if not eq:
        raise UnsupportedNode("Einsum without an equation")
    return torch.einsum(eq, *inputs)


@converter("Attention", since=23)
def attention(ctx, node, inputs):
    """ONNX Attention without a KV cache: softmax(Q K^T * scale + mask) V as matmuls (what PT2E
    quantizes in an SDPA export), 3-D inputs split by q_num_heads/kv_num_heads, grouped K/V heads
    repeated, ``is_causal`` upper-left aligned (ORT's attention_helper: query i sees keys <= i)."""

    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    if any(t is not None for t in inputs[4:]) or any(node.outputs[1:]):
        raise UnsupportedNode("Attention with past_key/past_value, present_* or qk_matmul outputs")
    if float(node.attr("softcap", 0.0)) != 0.0:
        raise UnsupportedNode("Attention softcap")
    three_d = q.dim() == 3
    if three_d:
        hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if not hq or not hkv:
            raise UnsupportedNode("Attention on 3-D inputs without q_num_heads/kv_num_heads")
        b = q.shape[0]
        q = q.reshape(b, q.shape[1], int(hq), -1).transpose(1, 2)
        k = k.reshape(b, k.shape[1], int(hkv), -1).transpose(1, 2)
        v = v.reshape(b, v.shape[1], int(hkv), -1).transpose(1, 2)
    if k.shape[1] != q.shape[1]:  # grouped-query attention: each K/V head serves q_heads / kv_heads queries
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scale = node.attr("scale")
    scale = float(scale) if scale is not None else 1.0 / float(q.shape[-1]) ** 0.5
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if mask is not None:
        scores = (scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask)
    if node.attr("is_causal", 0):
        sq, sk = scores.shape[-2], scores.shape[-1]
        allowed = torch.ones(sq, sk, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    y = torch.matmul(torch.softmax(scores, dim=-1), v)
    if three_d:
        y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
    return y


@converter("RotaryEmbedding", since=23)
def rotary_embedding(ctx, node, inputs):
    """ONNX RotaryEmbedding (opset 23, the spec's function body): the first ``rotary_embedding_dim``
    channels of each head rotated by cos/sin, read at ``position_ids`` when given; halves
    (``interleaved`` 0) or even/odd pairs (1). 4-D input is [batch, heads, seq, head], 3-D is
    [batch, seq, heads * head] with ``num_heads``."""

    x, cos, sin = inputs[:3]
    pos = inputs[3] if len(inputs) > 3 else None
    three_d = x.dim() == 3
    if three_d:
        heads = node.attr("num_heads")
        if not heads:
            raise UnsupportedNode("RotaryEmbedding on 3-D input without num_heads")
        x = x.reshape(x.shape[0], x.shape[1], int(heads), -1)  # [b, s, n, h]
    else:
        x = x.transpose(1, 2)  # [b, s, n, h]
    rd = int(node.attr("rotary_embedding_dim", 0)) or x.shape[-1]
    if pos is not None:
        cos, sin = cos[pos.to(torch.int64)], sin[pos.to(torch.int64)]
    cos, sin = cos[..., : rd // 2].unsqueeze(2), sin[..., : rd // 2].unsqueeze(2)  # [b, s, 1, rd/2]
    rot, rest = x[..., :rd], x[..., rd:]
    if node.attr("interleaved", 0):
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        turned = torch.stack((cos * x1 - sin * x2, sin * x1 + cos * x2), dim=-1).reshape(rot.shape)
    else:
        x1, x2 = rot[..., : rd // 2], rot[..., rd // 2:]
        turned = torch.cat((cos * x1 - sin * x2, sin * x1 + cos * x2), dim=-1)
    y = torch.cat((turned, rest), dim=-1)
    return y.reshape(y.shape[0], y.shape[1], -1) if three_d else y.transpose(1, 2)


@converter("MatMulInteger")
def matmul_integer(ctx, node, inputs):

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


def _qparams(node, inputs):
    """(x, scale, zero point or None, and the two shaped to broadcast along ``axis`` against x): what
    QuantizeLinear and DequantizeLinear read alike."""
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else None
    axis = int(node.attr("axis", 1))
    return x, scale, zp, _bcast(scale, x, axis), _bcast(zp, x, axis)


@converter("DequantizeLinear")
def dequantize(ctx, node, inputs):
    x, scale, zp, s, z = _qparams(node, inputs)
    xf = x.to(torch.float32)
    if z is not None:
        xf = xf - z.to(torch.float32)
    return (xf * s).to(scale.dtype)


@converter("QuantizeLinear")
def quantize(ctx, node, inputs):
    x, scale, zp, s, z = _qparams(node, inputs)
    dtype = zp.dtype if zp is not None else torch.uint8
    info = torch.iinfo(dtype)
    q = torch.round(x / s)
    if z is not None:
        q = q + z.to(q.dtype)
    return torch.clamp(q, info.min, info.max).to(dtype)

# ------------------------------------------------------------------------------------------
# STFT (opset 17) and DFT (opset 17, 20) as one F.linear by the DFT basis.
#
# Audio front-ends exported with opset 17 (a log-mel spectrogram in front of Whisper-, NeMo- or
# Kaldi-style models) carry one STFT or DFT. torch's own ``torch.stft`` computes in complex
# tensors, which neither PT2E nor torch.onnx.export carries; a DFT of a static length is a matmul
# by a constant matrix instead: ``X[k] = sum_t x[t] * (cos(2 pi k t / N) - i sin(2 pi k t / N))``.
# That is ``F.linear`` over the frames with the cos and sin rows stacked as its weight (the STFT's
# window folded into it), so PT2E quantizes it like any linear layer. The basis is built in float64
# and stored as float32; ORT computes the same sums with its FFT, so the two agree to float32
# rounding (the parity check compares them on every job).
#
# Output layout as ONNX has it: ``[..., bins, 2]``, real and imaginary parts last.


def _weight(n: int, bins: int, *, window: np.ndarray | None = None, inverse: bool = False,
            complex_input: bool = False) -> np.ndarray:
    """[2 * bins, n] (real input) or [2 * bins, 2 * n] (real parts then imaginary parts in): rows
    0..bins-1 give the real part of each bin, rows bins.. its imaginary part."""
    k = np.arange(bins, dtype=np.float64)[:, None]
    t = np.arange(n, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * ((k * t) % n) / n  # the modulo keeps the angle small: exact for long frames too
    cos, sin = np.cos(angle), (1.0 if inverse else -1.0) * np.sin(angle)
    if window is not None:
        cos, sin = cos * window[None, :], sin * window[None, :]
    if complex_input:  # (a + ib)(cos + i sin) = (a cos - b sin) + i (a sin + b cos)
        w = np.block([[cos, -sin], [sin, cos]])
    else:
        w = np.concatenate([cos, sin], axis=0)
    if inverse:
        w = w / n
    return w.astype(np.float32)


def _spectrum(frames_re, frames_im, weight: np.ndarray, bins: int):
    """frames [..., n] (and their imaginary parts, or None) -> [..., bins, 2]."""

    x = frames_re if frames_im is None else torch.cat([frames_re, frames_im], dim=-1)
    y = F.linear(x, torch.from_numpy(weight))  # [..., 2 * bins]
    return torch.stack([y[..., :bins], y[..., bins:]], dim=-1)


def _int_const(ctx, node, index: int, what: str) -> int | None:
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    c = ctx.const(node.inputs[index])
    if c is None:
        raise UnsupportedNode(f"{node.op_type} {what} that is not a constant")
    return int(np.asarray(c).reshape(-1)[0])


@converter("STFT", since=17)
def stft(ctx, node, inputs):
    signal = inputs[0]
    step = _int_const(ctx, node, 1, "frame_step")
    window = None
    if len(node.inputs) > 2 and node.inputs[2]:
        window = ctx.const(node.inputs[2])
        if window is None:
            raise UnsupportedNode("STFT window that is not a constant")
        window = np.asarray(window, dtype=np.float64).reshape(-1)
    length = _int_const(ctx, node, 3, "frame_length")
    n = len(window) if window is not None else length
    if n is None or step is None or step < 1:
        raise UnsupportedNode("STFT without a window or frame_length, or with frame_step < 1")
    if window is not None and length is not None and length != n:
        raise UnsupportedNode(f"STFT frame_length {length} differs from the window's length {n}")
    onesided = bool(node.attr("onesided", 1))
    bins = n // 2 + 1 if onesided else n
    complex_input = signal.dim() == 3 and signal.shape[-1] == 2
    if complex_input and onesided:
        raise UnsupportedNode("STFT onesided on a complex signal (ONNX allows onesided for real input only)")
    if signal.dim() == 3:
        re, im = signal[..., 0], (signal[..., 1] if complex_input else None)
    else:  # [batch, length]: what ORT also accepts for a real signal
        re, im = signal, None
    frames_re = re.unfold(-1, n, step)  # [batch, frames, n]
    frames_im = im.unfold(-1, n, step) if im is not None else None
    return _spectrum(frames_re, frames_im, _weight(n, bins, window=window, complex_input=complex_input), bins)


@converter("DFT", since=17)
def dft(ctx, node, inputs):

    x = inputs[0]
    if ctx.opset >= 20:
        axis = _int_const(ctx, node, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(node.attr("axis", 1))
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if x.dim() < 2 or x.shape[-1] not in (1, 2):
        raise UnsupportedNode("DFT input whose last dim is not 1 (real) or 2 (complex)")
    axis = norm_axis(axis, x.dim())
    if axis == x.dim() - 1:
        raise UnsupportedNode("DFT along the real/imaginary axis")
    complex_input = x.shape[-1] == 2
    if inverse and onesided:
        raise UnsupportedNode("DFT inverse with onesided")
    if complex_input and onesided:
        raise UnsupportedNode("DFT onesided on a complex signal")
    size = int(x.shape[axis])
    n = _int_const(ctx, node, 1, "dft_length") or size
    re = x[..., 0].movedim(axis, -1)  # the transformed axis last
    im = x[..., 1].movedim(axis, -1) if complex_input else None
    if n != size:  # ONNX: zero-pad or truncate the signal to dft_length
        pad = max(n - size, 0)
        re = torch.nn.functional.pad(re[..., :n], (0, pad))
        im = torch.nn.functional.pad(im[..., :n], (0, pad)) if im is not None else None
    bins = n // 2 + 1 if onesided else n
    y = _spectrum(re, im, _weight(n, bins, inverse=inverse, complex_input=complex_input), bins)  # [..., bins, 2]
    return y.movedim(-2, axis)
