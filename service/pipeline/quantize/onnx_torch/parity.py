"""Parity before quantization: the converted module vs ORT running the fp32 ONNX, same feeds.

Measured as the largest absolute difference over every float output element of every feed
(``max_abs_error_vs_onnx``), with ORT at ORT_DISABLE_ALL (no fusions: the graph as written).
Poor parity: an error above ``RTOL * max(1, max |ORT output|)`` on a float output, or integer/bool
outputs that differ in more than ``INT_MISMATCH`` of their elements (an argmax may flip on a tie).
Then the first diverging tensor is found by running both with every intermediate exposed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.pipeline.runtime.ort_sessions import session_for

from .module import contiguous, record_values

RTOL = 1e-3
INT_MISMATCH = 0.01


@dataclass
class Parity:
    ok: bool
    max_abs_error: float | None
    per_output: dict[str, float] = field(default_factory=dict)
    feeds: int = 0
    reason: str = ""
    first_diverging: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"ok": self.ok, "feeds": self.feeds, "per_output_max_abs": self.per_output,
             "measured": "max |torch - ORT| over every float output element, ORT_DISABLE_ALL on the fp32 ONNX",
             "tolerance": f"{RTOL} x max(1, max |ORT output|)"}
        if self.first_diverging:
            d["first_diverging_tensor"] = self.first_diverging
        return d


def _session(model_or_path):
    # Through ort_sessions: the constant-folding cap holds for every session the service builds.
    return session_for(model_or_path, "disable_all")


def _torch_outputs(module, names, feed) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = module(*[torch.from_numpy(contiguous(feed[n])) for n in names])
    out = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() for o in out]


def _error(a: np.ndarray, b: np.ndarray) -> tuple[float, bool]:
    """(max abs error or mismatch share, within tolerance)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf"), False
    if b.dtype.kind == "f":
        if a.size == 0:
            return 0.0, True
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(b64)
        same_inf = np.isinf(a64) & (a64 == b64)
        diff = np.where(both_nan | same_inf, 0.0, np.abs(a64 - b64))
        err = float(np.nan_to_num(diff, nan=np.inf).max())
        finite = b64[np.isfinite(b64)]
        scale = max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
        return err, err <= RTOL * scale
    mismatch = float(np.mean(a != b)) if a.size else 0.0
    return mismatch, mismatch <= INT_MISMATCH


def parity_vs_onnx(module, onnx_path, names: list[str], feeds: list[dict[str, np.ndarray]], *,
                   specialized_model=None) -> Parity:
    sess = _session(onnx_path)
    out_names = [o.name for o in sess.get_outputs()]
    input_names = {i.name for i in sess.get_inputs()}
    worst = 0.0
    per_output: dict[str, float] = {}
    bad = None
    bad_feed = None
    for feed in feeds:
        ref = sess.run(None, {k: v for k, v in feed.items() if k in input_names})
        got = _torch_outputs(module, names, feed)
        for name, r, g in zip(out_names, ref, got):
            err, ok = _error(g, r)
            if np.asarray(r).dtype.kind == "f":
                per_output[name] = max(per_output.get(name, 0.0), err)
                worst = max(worst, err)
            if not ok and bad is None:
                bad = (name, err, np.asarray(r).dtype)
                bad_feed = feed
    parity = Parity(ok=bad is None, max_abs_error=round(worst, 9) if per_output else 0.0,
                    per_output={k: float(f"{v:.3g}") for k, v in per_output.items()}, feeds=len(feeds))
    if bad is not None:
        name, err, dtype = bad
        what = f"max abs error {err:.3g}" if dtype.kind == "f" else f"{err:.1%} of elements differ"
        first = None
        if specialized_model is not None:
            try:  # every tensor of the module on the feed that diverged, vs ORT's on the same feed
                first = first_diverging(specialized_model, record_values(module, bad_feed), bad_feed)
            except Exception:  # noqa: BLE001 - the localization is a help, the verdict stands
                first = None
        parity.first_diverging = first
        parity.reason = f"output {name!r}: {what}" + (f"; first diverging tensor: {first}" if first else "")
    return parity


def first_diverging(model, record: dict[str, Any], feed: dict[str, np.ndarray]) -> str | None:
    """The first tensor, in graph order, where the build run's value differs from ORT's."""
    import onnx
    from onnx import helper

    work = onnx.ModelProto()
    work.CopyFrom(model)
    have = {o.name for o in work.graph.output}
    order = [o for n in work.graph.node for o in n.output if o and o in record]
    for name in order:
        if name not in have:
            work.graph.output.append(helper.make_empty_tensor_value_info(name))
    sess = _session(work.SerializeToString())
    input_names = {i.name for i in sess.get_inputs()}
    outs = [o.name for o in sess.get_outputs()]
    values = dict(zip(outs, sess.run(None, {k: v for k, v in feed.items() if k in input_names})))
    for node in work.graph.node:
        for name in node.output:
            if name not in values or name not in record:
                continue
            mine = record[name]
            mine = mine.detach().numpy() if hasattr(mine, "detach") else np.asarray(mine)
            err, ok = _error(mine, values[name])
            if not ok:
                return f"{name!r} (output of {node.op_type} node {node.name!r}, error {err:.3g})"
    return None
