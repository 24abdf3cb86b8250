"""RNN, GRU and LSTM -> plain torch ops, unrolled over the static sequence length.

Why unrolled linears and not torch.nn.LSTM/GRU (aten.lstm): PT2E's XNNPACK quantizer annotates
``aten.linear``/``aten.matmul``, not the fused ``aten.lstm``/``aten.gru`` ops, which torch.export
keeps whole and PT2E leaves in float. Written as one ``F.linear`` over all time steps for the input
projection (X·Wᵀ + Wb) plus one ``F.linear`` per step for the recurrence (H·Rᵀ + Rb), every
matrix product of the cell is a quantizable linear, the weights stay the model's parameters (sliced
per direction), and nothing depends on data: the sequence length is the static input shape.
The cost is a graph that grows with the sequence length (a few ops per step), acceptable for the
short fixed sequences of exported models.

Past ``UNROLL_UP_TO_STEPS`` steps (sequence x directions) an LSTM or GRU whose variant torch has
(default activations, no clip, no input_forget, no peepholes, every sequence full length, GRU
``linear_before_reset=1`` as torch.nn.GRU computes it) is kept whole as ``torch.lstm`` /
``torch.gru``: what torch.export writes for an ``nn.LSTM`` model, which PT2E leaves in float and
torch.onnx.export writes as one ONNX LSTM/GRU. Unrolled, a 2-layer LSTM over 300 steps was still
in torch.onnx.export after 14 minutes (docs/history/notes.md, "fifth pass"); whole, the same network
quantizes in ~15 s. Other variants unroll up to ``MAX_STEPS`` and are refused past it.

Semantics follow the ONNX spec and ORT's CPU kernels (deep_cpu_lstm / deep_cpu_gru / rnn):
gate orders (LSTM i,o,f,c; GRU z,r,h), peepholes P = [Pi, Po, Pf], ``clip`` applied to every gate's
pre-activation, ``input_forget`` (f = 1 - i), GRU ``linear_before_reset``, ``layout`` 0 and 1,
``activations`` with their alpha/beta lists, and a static ``sequence_lens``: steps past a
sequence's length leave its state unchanged and write zeros to Y; the reverse direction starts at
each sequence's own last step; a sequence of length 0 ends with zero states (as ORT writes them).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..registry import ConvertContext, OnnxNode, UnsupportedNode, converter
from ._spatial import text

# torch.export time grows with the unrolled graph: a bidirectional LSTM (hidden 32) took 43 s to
# export at 64 steps and 149 s at 256 (2 shared cores, 2026-12-01), so 512 steps is ~5 minutes.
MAX_STEPS = 512
UNROLL_UP_TO_STEPS = 128  # a 64-step bidirectional LSTM: 43 s of torch.export, about the most a job should pay

# name -> (function(x, alpha, beta), default alpha, default beta); None: takes no alpha/beta.
# The list and the defaults are ORT's (rnn_helpers.cc).
_ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "sigmoid": (lambda x, a, b: torch.sigmoid(x), None, None),
    "tanh": (lambda x, a, b: torch.tanh(x), None, None),
    "relu": (lambda x, a, b: torch.relu(x), None, None),
    "affine": (lambda x, a, b: x * a + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: F.leaky_relu(x, a), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: torch.where(x > a, x, torch.zeros_like(x)), 1.0, None),
    "scaledtanh": (lambda x, a, b: torch.tanh(x * b) * a, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: torch.clamp(x * a + b, 0.0, 1.0), 0.2, 0.5),
    "elu": (lambda x, a, b: F.elu(x, a), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + x.abs()), None, None),
    "softplus": (lambda x, a, b: F.softplus(x), None, None),
}

_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activations(node: OnnxNode, directions: int) -> list[list[Callable[[torch.Tensor], torch.Tensor]]]:
    """Per direction, the cell's activation functions with their alpha/beta bound."""
    per_dir = len(_DEFAULT_ACTIVATIONS[node.op_type])
    names = [text(n) for n in node.attrs.get("activations", [])] or _DEFAULT_ACTIVATIONS[node.op_type] * directions
    if len(names) == per_dir and directions == 2:
        names = names * 2  # ORT accepts one set for both directions
    if len(names) != per_dir * directions:
        raise UnsupportedNode(f"{node.op_type} {node.name!r}: {len(names)} activations for {directions} direction(s)")
    alphas = list(node.attrs.get("activation_alpha", []))
    betas = list(node.attrs.get("activation_beta", []))
    funcs = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise UnsupportedNode(f"{node.op_type} {node.name!r}: activation {name!r}")
        fn, da, db = _ACTIVATIONS[key]
        a = float(alphas.pop(0)) if da is not None and alphas else da
        b = float(betas.pop(0)) if db is not None and betas else db
        funcs.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [funcs[d * per_dir:(d + 1) * per_dir] for d in range(directions)]


class _Steps:
    """Static sequence_lens: which (step, batch) cells are live, and the per-sequence reversal."""

    def __init__(self, ctx: ConvertContext, node: OnnxNode, seq: int, batch: int):
        self.seq, self.batch = seq, batch
        self.lengths = None
        name = node.inputs[4] if len(node.inputs) > 4 else ""
        if name:
            value = ctx.const(name)
            if value is None:
                raise UnsupportedNode(f"{node.op_type} {node.name!r}: sequence_lens ({name!r}) is not a constant; "
                                      "fix the input's value or drop the input")
            lengths = np.asarray(value).astype(np.int64).ravel()
            if lengths.shape != (batch,) or (lengths < 0).any() or (lengths > seq).any():
                raise UnsupportedNode(f"{node.op_type} {node.name!r}: sequence_lens {lengths.tolist()} "
                                      f"do not fit seq_length {seq} and batch {batch}")
            if (lengths != seq).any():
                self.lengths = lengths

    def live(self, t: int) -> torch.Tensor | None:
        """[batch, 1] bool: sequences still running at step t, or None when all are."""
        if self.lengths is None or (self.lengths > t).all():
            return None
        return torch.from_numpy((self.lengths > t)[:, None].copy())

    def empty(self) -> torch.Tensor | None:
        """[batch, 1] bool: sequences of length 0, or None when there are none."""
        if self.lengths is None or not (self.lengths == 0).any():
            return None
        return torch.from_numpy((self.lengths == 0)[:, None].copy())

    def reverse(self, x: torch.Tensor) -> torch.Tensor:
        """x[t, b] -> x[len_b - 1 - t, b] for t < len_b (an involution; padding steps stay)."""
        if self.lengths is None:
            return x.flip(0)
        t = np.arange(self.seq)[:, None]
        src = np.where(t < self.lengths[None, :], self.lengths[None, :] - 1 - t, t)  # [seq, batch]
        index = torch.from_numpy(src.astype(np.int64)).reshape(self.seq, self.batch, 1).expand(-1, -1, x.shape[-1])
        return torch.gather(x, 0, index)


def _run(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    kind = node.op_type
    x, w, r = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    h0 = inputs[5] if len(inputs) > 5 else None
    c0 = inputs[6] if len(inputs) > 6 and kind == "LSTM" else None
    p = inputs[7] if len(inputs) > 7 and kind == "LSTM" else None
    layout = int(node.attrs.get("layout", 0))
    if layout:
        x = x.transpose(0, 1)
        h0 = h0.transpose(0, 1) if h0 is not None else None
        c0 = c0.transpose(0, 1) if c0 is not None else None
    seq, batch = int(x.shape[0]), int(x.shape[1])
    hidden = int(node.attrs.get("hidden_size", r.shape[-1]))
    direction = text(node.attrs.get("direction"), "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise UnsupportedNode(f"{kind} {node.name!r}: direction={direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    steps = _Steps(ctx, node, seq, batch)
    if seq * dirs > UNROLL_UP_TO_STEPS and _torch_has_it(ctx, node, steps):
        y, y_h, y_c = _whole(kind, x, w, r, b, h0, c0, hidden, direction)
        return _batch_major([y, y_h, y_c], layout, kind)
    if seq > MAX_STEPS:
        raise UnsupportedNode(f"{kind} {node.name!r}: {seq} steps to unroll (limit {MAX_STEPS})")
    acts = _activations(node, dirs)
    clip = node.attrs.get("clip")
    clamp = (lambda v: v.clamp(-float(clip), float(clip))) if clip is not None else (lambda v: v)
    gates = _GATES[kind] * hidden
    ys, hs, cs = [], [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        wb = b[d, :gates] if b is not None else None
        rb = b[d, gates:] if b is not None else None
        xs = steps.reverse(x) if reverse else x
        proj = F.linear(xs, w[d], wb)  # [seq, batch, gates]: the input half of every step at once
        h = h0[d] if h0 is not None else torch.zeros(batch, hidden, dtype=x.dtype)
        c = (c0[d] if c0 is not None else torch.zeros(batch, hidden, dtype=x.dtype)) if kind == "LSTM" else None
        # Each recurrent weight is sliced once, before the steps: one weight node that every step's
        # linear reads, so convert_pt2e folds one quantized constant. Sliced inside the loop, each step
        # had a slice node of its own and the PT2E file stored the int8 weight once per step.
        rec = _gru_weights(node, r[d], rb, hidden) if kind == "GRU" else (r[d], rb)
        out = []
        for t in range(seq):
            if kind == "RNN":
                h_new, c_new = acts[d][0](clamp(proj[t] + F.linear(h, *rec))), None
            elif kind == "GRU":
                h_new, c_new = _gru_cell(node, proj[t], h, rec, hidden, acts[d], clamp), None
            else:
                h_new, c_new = _lstm_cell(node, proj[t], h, c, rec, p[d] if p is not None else None,
                                          hidden, acts[d], clamp)
            live = steps.live(t)
            if live is None:
                h, c = h_new, c_new
                out.append(h_new)
            else:
                h = torch.where(live, h_new, h)
                c = torch.where(live, c_new, c) if c is not None else None
                out.append(torch.where(live, h_new, torch.zeros_like(h_new)))
        empty = steps.empty()
        if empty is not None:  # ORT writes zeros, not the initial state, for a length-0 sequence
            h = torch.where(empty, torch.zeros_like(h), h)
            c = torch.where(empty, torch.zeros_like(c), c) if c is not None else None
        y = torch.stack(out, 0)
        ys.append(steps.reverse(y) if reverse else y)
        hs.append(h)
        cs.append(c)
    y = torch.stack(ys, 1)  # [seq, dirs, batch, hidden]
    y_h = torch.stack(hs, 0)  # [dirs, batch, hidden]
    y_c = torch.stack(cs, 0) if kind == "LSTM" else None
    return _batch_major([y, y_h, y_c], layout, kind)


def _batch_major(outs, layout: int, kind: str):
    """Y [seq, dirs, batch, hidden], Y_h / Y_c [dirs, batch, hidden] in the node's layout."""
    y, y_h, y_c = outs
    if layout:
        y = y.permute(2, 0, 1, 3)  # [batch, seq, dirs, hidden]
        y_h = y_h.transpose(0, 1)
        y_c = y_c.transpose(0, 1) if y_c is not None else None
    return [y, y_h, y_c] if kind == "LSTM" else [y, y_h]


def _torch_has_it(ctx: ConvertContext, node: OnnxNode, steps: _Steps) -> bool:
    """torch.lstm / torch.gru compute this node: ONNX's defaults, full sequences, no peepholes.
    Decided from static values only (``ctx.const``): forward runs again under torch.export."""
    kind = node.op_type
    if kind == "RNN" or steps.lengths is not None or node.attrs.get("clip") is not None:
        return False
    default = [a.lower() for a in _DEFAULT_ACTIVATIONS[kind]]
    names = [text(n).lower() for n in node.attrs.get("activations", [])]
    if names and names not in (default, default * 2):
        return False
    if kind == "LSTM":
        peepholes = node.inputs[7] if len(node.inputs) > 7 else ""
        p = ctx.const(peepholes) if peepholes else None
        no_peepholes = not peepholes or (p is not None and not np.asarray(p).any())
        return not int(node.attrs.get("input_forget", 0)) and no_peepholes
    return bool(int(node.attrs.get("linear_before_reset", 0)))  # torch.nn.GRU's formula


# ONNX gate blocks -> torch's: LSTM i,o,f,c -> i,f,g,o; GRU z,r,h -> r,z,n
_TORCH_GATE_ORDER = {"LSTM": (0, 2, 3, 1), "GRU": (1, 0, 2)}


def _whole(kind, x, w, r, b, h0, c0, hidden, direction):
    """The node as one torch.lstm / torch.gru call (seq-major x); (Y, Y_h, Y_c) in ONNX's layout 0."""
    seq, batch = int(x.shape[0]), int(x.shape[1])
    dirs = 2 if direction == "bidirectional" else 1
    gates = _GATES[kind] * hidden

    def torch_order(t):
        return torch.cat([t[k * hidden:(k + 1) * hidden] for k in _TORCH_GATE_ORDER[kind]], 0)

    params = []
    for d in range(dirs):
        params += [torch_order(w[d]), torch_order(r[d])]
        if b is not None:
            params += [torch_order(b[d, :gates]), torch_order(b[d, gates:])]
    h = h0 if h0 is not None else torch.zeros(dirs, batch, hidden, dtype=x.dtype)
    xs = x.flip(0) if direction == "reverse" else x  # torch has no reverse-only RNN
    if kind == "LSTM":
        c = c0 if c0 is not None else torch.zeros(dirs, batch, hidden, dtype=x.dtype)
        y, y_h, y_c = torch.lstm(xs, (h, c), params, b is not None, 1, 0.0, False, dirs == 2, False)
    else:
        (y, y_h), y_c = torch.gru(xs, h, params, b is not None, 1, 0.0, False, dirs == 2, False), None
    if direction == "reverse":
        y = y.flip(0)
    return y.reshape(seq, batch, dirs, hidden).transpose(1, 2), y_h, y_c


def _gru_weights(node, r, rb, hidden) -> tuple:
    """(weight, bias) of the whole recurrence (``linear_before_reset``), or of its update/reset half
    followed by those of its hidden part."""
    if int(node.attrs.get("linear_before_reset", 0)):
        return r, rb
    return (r[:2 * hidden], rb[:2 * hidden] if rb is not None else None,
            r[2 * hidden:], rb[2 * hidden:] if rb is not None else None)


def _gru_cell(node, xp, h, rec_weights, hidden, acts, clamp):
    f, g = acts
    x_z, x_r, x_h = xp[:, :hidden], xp[:, hidden:2 * hidden], xp[:, 2 * hidden:]
    if int(node.attrs.get("linear_before_reset", 0)):
        rec = F.linear(h, *rec_weights)
        z = f(clamp(x_z + rec[:, :hidden]))
        rr = f(clamp(x_r + rec[:, hidden:2 * hidden]))
        h_tilde = g(clamp(x_h + rr * rec[:, 2 * hidden:]))
    else:
        r_zr, rb_zr, r_h, rb_h = rec_weights
        rec = F.linear(h, r_zr, rb_zr)
        z = f(clamp(x_z + rec[:, :hidden]))
        rr = f(clamp(x_r + rec[:, hidden:]))
        h_tilde = g(clamp(x_h + F.linear(rr * h, r_h, rb_h)))
    return (1 - z) * h_tilde + z * h


def _lstm_cell(node, xp, h, c, rec_weights, p, hidden, acts, clamp):
    f, g, hfn = acts
    pre = xp + F.linear(h, *rec_weights)
    i_pre, o_pre, f_pre, c_pre = (pre[:, k * hidden:(k + 1) * hidden] for k in range(4))
    if p is not None:
        i_pre = i_pre + p[:hidden] * c
        f_pre = f_pre + p[2 * hidden:] * c
    i = f(clamp(i_pre))
    forget = 1 - i if int(node.attrs.get("input_forget", 0)) else f(clamp(f_pre))
    c_new = forget * c + i * g(clamp(c_pre))
    if p is not None:
        o_pre = o_pre + p[hidden:2 * hidden] * c_new
    o = f(clamp(o_pre))
    return o * hfn(c_new), c_new


@converter("RNN", since=7)
def rnn(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    return _run(ctx, node, inputs)


@converter("GRU", since=7)
def gru(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    return _run(ctx, node, inputs)


@converter("LSTM", since=7)
def lstm(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    return _run(ctx, node, inputs)
