"""Parity before quantization: the converted module vs ORT running the fp32 ONNX, same feeds.

Measured as the largest absolute difference over every float output element of every feed
(``max_abs_error_vs_onnx``), with ORT at ORT_DISABLE_ALL (no fusions: the graph as written).
Poor parity: an error above ``RTOL * max(1, max |ORT output|)`` on a float output, or integer/bool
outputs that differ in more than ``INT_MISMATCH`` of their elements (an argmax may flip on a tie).
Then the first diverging tensor is found by running both with every intermediate exposed.

A ranking (TopK, ArgMax, ArgMin) whose input agrees but which picked other positions among values
within the tolerance has broken a tie, not converted wrongly. ORT's Sigmoid gives 0.0 where torch
gives 8.9e-10 (onnxruntime/core/mlas/lib/logistic.cpp: the input clamped to [-18, 18] by
MlasLogisticConstants, the result to [0, 1], and the polynomial is below 0 at -18), and ONNX orders
equal values by index (TopK: "the element with the lower index will appear first"), so a
detector's end-to-end head (TopK of 300 of 336 anchors, 217 of them at 0.0 in ORT) picks other
anchors than torch. Everything downstream of such a ranking's indices is then not compared
(``Parity.after_ties``), and parity is judged on the rest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.pipeline.ort.sessions import session_for
from service.pipeline.vocabulary import RANKING_OPS


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
    # output -> the ranking that broke a tie upstream of it: not compared (see the module docstring)
    after_ties: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"ok": self.ok, "feeds": self.feeds, "per_output_max_abs": self.per_output,
             "measured": "max |torch - ORT| over every float output element, ORT_DISABLE_ALL on the fp32 ONNX",
             "tolerance": f"{RTOL} x max(1, max |ORT output|)"}
        if self.first_diverging:
            d["first_diverging_tensor"] = self.first_diverging
        if self.after_ties:
            d["not_compared_after_ties"] = self.after_ties
        return d


def _session(model_or_path):
    # Through ort_sessions: the constant-folding cap holds for every session the service builds.
    return session_for(model_or_path, "disable_all")


def _torch_outputs(module, names, feed) -> list[np.ndarray]:
    import torch
    from onnx_torch.module import contiguous

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
    runs = [(feed, sess.run(None, {k: v for k, v in feed.items() if k in input_names}),
             _torch_outputs(module, names, feed)) for feed in feeds]
    parity = _judged(runs, out_names, skip={})
    if parity.ok or specialized_model is None:
        return parity
    bad_feed = next(feed for feed, ref, got in runs if not all(_error(g, r)[1] for r, g in zip(ref, got)))
    from onnx_torch.module import record_values

    try:  # every tensor of the module on the feed that diverged, vs ORT's on the same feed
        first, ties = first_diverging(specialized_model, record_values(module, bad_feed), bad_feed)
    except Exception:  # noqa: BLE001 - the localization is a help, the verdict stands
        first, ties = None, {}
    if ties:  # the outputs downstream of a ranking that broke a tie are not evidence either way
        parity = _judged(runs, out_names, skip=downstream_outputs(specialized_model, ties))
    parity.first_diverging = None if parity.ok else first
    if not parity.ok and first:
        parity.reason += f"; first diverging tensor: {first}"
    return parity


def _judged(runs, out_names: list[str], *, skip: dict[str, str]) -> Parity:
    """Parity over every feed's outputs, leaving out those in ``skip`` (output -> why)."""
    worst = 0.0
    per_output: dict[str, float] = {}
    bad = None
    for _feed, ref, got in runs:
        for name, r, g in zip(out_names, ref, got):
            if name in skip:
                continue
            err, ok = _error(g, r)
            if np.asarray(r).dtype.kind == "f":
                per_output[name] = max(per_output.get(name, 0.0), err)
                worst = max(worst, err)
            if not ok and bad is None:
                bad = (name, err, np.asarray(r).dtype)
    parity = Parity(ok=bad is None, max_abs_error=round(worst, 9) if per_output else 0.0,
                    per_output={k: float(f"{v:.3g}") for k, v in per_output.items()}, feeds=len(runs),
                    after_ties=dict(skip))
    if bad is not None:
        name, err, dtype = bad
        what = f"max abs error {err:.3g}" if dtype.kind == "f" else f"{err:.1%} of elements differ"
        parity.reason = f"output {name!r}: {what}"
    return parity


def downstream_outputs(model, ties: dict[str, str]) -> dict[str, str]:
    """Graph output -> the tie (``ties``: tensor -> why) it is computed from, in graph order."""
    origin = dict(ties)
    for node in model.graph.node:
        why = next((origin[i] for i in node.input if i in origin), None)
        if why is not None:
            origin.update((o, why) for o in node.output if o)
    return {o.name: origin[o.name] for o in model.graph.output if o.name in origin}


def first_diverging(model, record: dict[str, Any], feed: dict[str, np.ndarray]) -> tuple[str | None, dict[str, str]]:
    """The first tensor, in graph order, where the build run's value differs from ORT's, not counting
    what follows a ranking that broke a tie; and those rankings' outputs (tensor -> why)."""
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
    ties: dict[str, str] = {}
    after: set[str] = set()  # downstream of a tie: other values, and no fault of the converter
    for node in work.graph.node:
        if any(i in after for i in node.input):
            after.update(o for o in node.output if o)
            continue
        for name in node.output:
            if name not in values or name not in record:
                continue
            err, ok = _error(_numpy(record[name]), values[name])
            if ok:
                continue
            why = _tie(node, record, values) if node.op_type in RANKING_OPS else None
            if why is None:
                return f"{name!r} (output of {node.op_type} node {node.name!r}, error {err:.3g})", ties
            indices = [o for o in (node.output[1:] if node.op_type == "TopK" else node.output[:1]) if o]
            ties.update((o, why) for o in indices)  # TopK's values agree (_tie checked): they stay compared
            after.update(indices)
            break
    return None, ties


def _numpy(value) -> np.ndarray:
    return value.detach().numpy() if hasattr(value, "detach") else np.asarray(value)


def _tie(node, record: dict[str, Any], values: dict[str, np.ndarray]) -> str | None:
    """Why a ranking node's indices differ without a conversion fault (its input agrees, and the
    values at torch's positions equal those at ORT's within the tolerance), or None."""
    import onnx

    x = node.input[0]
    if x not in values or x not in record or not _error(_numpy(record[x]), values[x])[1]:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "TopK":
        if len(node.output) < 2 or node.output[0] not in record or node.output[0] not in values:
            return None
        if not _error(_numpy(record[node.output[0]]), values[node.output[0]])[1]:
            return None  # other values picked: not a tie
    else:
        axis, source = int(attrs.get("axis", 0)), values[x]
        ours, theirs = _numpy(record[node.output[0]]), values[node.output[0]]
        if not attrs.get("keepdims", 1):
            ours, theirs = np.expand_dims(ours, axis), np.expand_dims(theirs, axis)
        try:
            picked = [np.take_along_axis(source, i.astype(np.int64), axis) for i in (ours, theirs)]
        except (ValueError, IndexError):
            return None
        if not _error(*picked)[1]:
            return None
    return (f"{node.op_type} node {node.name!r} picked other positions among values equal within the tolerance "
            "(a tie: ONNX orders equal values by index, and torch and ORT round small values differently)")
