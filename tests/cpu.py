"""What this machine's CPU does to int8 numerics, read from /proc/cpuinfo (not from the program).

On x86 with AVX2 but no VNNI, MLAS multiplies uint8 activations by int8 weights with vpmaddubsw,
whose int16 pair sums saturate: at the levels where ORT runs int8 kernels (`extended` and up) the
SQNR of a conv falls to about 16-20 dB, where a VNNI CPU or ORT's float Q/DQ emulation gives 30-40.
Tests that floor SQNR at those levels take the floor from here, so they pin the real behaviour on
either kind of CPU instead of failing on the one CI happens to get.
"""

from __future__ import annotations

import platform
from pathlib import Path


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


_FLAGS = _cpu_flags()
X86 = platform.machine() in ("x86_64", "AMD64")
U8S8_SATURATES = X86 and "avx2" in _FLAGS and not ({"avx512_vnni", "avx_vnni", "amx_int8"} & _FLAGS)

INT8_KERNEL_LEVELS = ("extended", "layout", "all")


def sqnr_floor(level: str, clean: float = 30.0) -> float:
    """The SQNR floor a small conv net must clear at `level` on this CPU (12 dB where u8s8 saturates)."""
    return 12.0 if U8S8_SATURATES and level in INT8_KERNEL_LEVELS else clean


def cosine_floor(level: str) -> float:
    """20 dB SQNR is a cosine of about 0.995: the floor follows `sqnr_floor`."""
    return 0.97 if sqnr_floor(level) < 30 else 0.999


def int8_kernels_exact(level: str) -> bool:
    """True where ORT's int8 kernels at `level` stay within a couple of steps of the float Q/DQ result."""
    return not (U8S8_SATURATES and level in INT8_KERNEL_LEVELS)
