"""What a candidate may save, from where the time goes: the time its nodes take in ORT's profile.

A pure function of the candidate and the profile of its artifact at the advice level
(``optimized.<level>.profile``, runtime/profile.py), so that the measuring order (``advice.by_expected_gain``)
reads time, not a count of nodes: a blocked 3x3 Conv of a detector's stem outweighs ten blocked 1x1s.

- the nodes a change addresses (``Candidate.blocked``): each node's own time where the profile lists it
  (``top_nodes``), else the mean time of a float compute node of that profile;
- a change to uint8 activations also addresses every int8 kernel on int8 activations (MLAS's s8s8 path:
  ``by_kernel["s8s8"]``, the kernels the trace names);
- an accuracy candidate is not about time: 0.

None without a profile (latency not timed at that level): the order then falls back to the artifact's
median and the count of blocked nodes.
"""

from __future__ import annotations

from service.pipeline.runtime.profile import op_class

__all__ = ["expected_gain_ms"]

_FLOAT_CLASS = "float kernels"


def expected_gain_ms(candidate, profile) -> float | None:
    """The milliseconds of ``profile`` (an ``OpProfile`` or None) spent in what ``candidate`` changes."""
    if profile is None:
        return None
    if candidate.kind == "accuracy":
        return 0.0
    listed = {n.node: n.ms for n in profile.top_nodes}
    floats = sum(n for op, n in profile.op_counts.items() if _float_op(op, profile))
    mean_float = profile.by_class.get(_FLOAT_CLASS, 0.0) / floats if floats else 0.0
    gain = sum(listed.get(name, mean_float) for name in candidate.blocked)
    if candidate.change.get("ort", {}).get("activation_type") == "uint8":
        gain += profile.by_kernel.get("s8s8", 0.0)
    return round(gain, 4)


def _float_op(op: str, profile) -> bool:
    return op_class(op) == _FLOAT_CLASS
