"""Numbers as a person reads them, shared by the CLI text and the page."""

from __future__ import annotations

from typing import Any


def human_size(n: Any, *, missing: str = "–") -> str:
    """Bytes in IEC units (1024): '812 B', '4.6 KiB', '44.7 MiB'."""
    if not isinstance(n, (int, float)):
        return missing
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
