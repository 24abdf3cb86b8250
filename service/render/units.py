"""Numbers as a person reads them, shared by the CLI text and the page."""

from __future__ import annotations

from typing import Any, Mapping


def human_size(n: Any, *, missing: str = "–") -> str:
    """Bytes in IEC units (1024): '812 B', '4.6 KiB', '44.7 MiB'."""
    if not isinstance(n, (int, float)):
        return missing
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def accuracy_word(num: Mapping[str, Any]) -> str | None:
    """What a level's SQNR cell shows when no output is judged by SQNR (``numerics.elementwise_outputs`` 0): the
    figures that judge its outputs instead ("angle 0.021 rad", "argmax 99.0%", "labels"), else "shape" (every
    output follows a selection) or "not measured"; None when some output is judged by SQNR."""
    outs = num.get("outputs") or []
    if num.get("elementwise_outputs") != 0 or not outs:
        return None
    parts = []
    if num.get("worst_angular_error") is not None:
        parts.append(f"angle {num['worst_angular_error']:.3g} rad")
    if any(o.get("judged_by") == "argmax_agreement" for o in outs) and num.get("worst_argmax_agreement") is not None:
        parts.append(f"argmax {100 * num['worst_argmax_agreement']:.1f}%")
    if num.get("exact_outputs"):
        parts.append("labels")
    if not parts:
        parts.append("shape" if all(o.get("compared") == "shape" for o in outs) else "not measured")
    return ", ".join(parts)
