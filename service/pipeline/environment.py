"""What machine and toolchain a report was made on.

Versions are read from package metadata, not by importing torch: the API process answers
``/v1/versions`` without paying torch's import time, and the cache key uses the same strings.
"""

from __future__ import annotations

import os
import platform
import sys
from functools import lru_cache
from importlib import metadata

from service import __version__
from service.schemas.report import CpuInfo, Environment

TOOLCHAIN = ("torch", "torchao", "onnx", "onnxscript", "onnxruntime", "numpy")

# /proc/cpuinfo flag -> the name we report. These decide MLAS's int8 kernels on x86:
# avx2 without vnni uses u8s8 via vpmaddubsw (can saturate: see ORT's reduce_range advice),
# avx_vnni / avx512_vnni use vpdpbusd; amx for the newest parts.
_ISA_FLAGS = {
    "sse4_1": "sse4_1", "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512vl": "avx512vl",
    "avx512_vnni": "avx512_vnni", "avx_vnni": "avx_vnni", "avx512_bf16": "avx512_bf16",
    "amx_int8": "amx_int8", "amx_tile": "amx_tile",
    "asimd": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "sve": "sve",
}


@lru_cache(maxsize=1)
def toolchain_versions() -> dict[str, str]:
    out = {}
    for name in TOOLCHAIN:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"

    out["quantcompare"] = __version__
    return out


@lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    flags: set[str] = set()
    model_name = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                elif key in ("model name", "Model") and model_name is None:
                    model_name = value.strip()
    except OSError:
        pass
    isa = {name: (flag in flags) for flag, name in _ISA_FLAGS.items()}
    arch = platform.machine()
    # Keep only flags that make sense for this architecture family.
    if arch in ("x86_64", "AMD64", "i686"):
        isa = {k: v for k, v in isa.items() if k not in ("neon", "dotprod", "i8mm", "sve")}
    else:
        isa = {k: v for k, v in isa.items() if k in ("neon", "dotprod", "i8mm", "sve")}
    return CpuInfo(arch=arch, model_name=model_name, logical_cores=os.cpu_count(), isa=isa)


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask), not every CPU the host has."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def environment() -> Environment:
    return Environment(
        versions=toolchain_versions(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        cpu=cpu_info(),
    )
