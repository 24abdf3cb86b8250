"""What this CPU's int8 kernels can do, read from /proc/cpuinfo independently of the program.

ORT's x86 u8s8 int8 GEMM (QLinearConv, QGemm, MatMulInteger) on AVX2 without VNNI multiplies
with ``vpmaddubsw``, whose 16-bit pairwise sums saturate; with AVX-VNNI / AVX512-VNNI / AMX it uses
``vpdpbusd`` (32-bit accumulate) and does not. So a QDQ model that ORT fuses into QLinearConv at
levels extended/layout/all loses accuracy on an AVX2-only machine (conv_relu: 20.3 dB there,
39.4 dB unfused) that it keeps on a VNNI machine. CI runs on whatever x86 it gets, so a test that
reads an SQNR at a fused level takes its floor from here instead of assuming one CPU.
"""

from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

FUSED_LEVELS = ("extended", "layout", "all")  # the levels at which ORT picks int8 kernels (QDQ fusion)


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def u8s8_may_saturate() -> bool:
    """True when ORT's u8s8 int8 kernels run on AVX2 without VNNI (x86 only)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return False
    flags = cpu_flags()
    return "avx2" in flags and not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}


def sqnr_floor(level: str, unsaturated: float = 30.0, saturated: float = 15.0) -> float:
    """The SQNR (dB) a well-quantized tiny conv model clears at ``level`` on THIS CPU."""
    return saturated if level in FUSED_LEVELS and u8s8_may_saturate() else unsaturated
