"""Where this machine differs from the course chapter (measured on arm64 / ORT 1.30).

Each note is derived from what the levels stage observed for *this* model, never asserted from
the architecture alone: a note appears only when the optimized graphs show the behaviour.
"""

from __future__ import annotations

from typing import Callable

from service.schemas.levels import OptimizedLevel, PlatformNote
from service.schemas.report import CpuInfo

ARM = ("aarch64", "arm64", "ARM64")


def _first(per_level: dict[str, OptimizedLevel], pred) -> str | None:
    for level, ol in per_level.items():
        if ol.error is None and pred(ol):
            return level
    return None


def _observed(optimized: dict[str, dict[str, OptimizedLevel]], *, topic: str, chapter: str, here: str,
              shows: Callable[[OptimizedLevel], bool], describe: Callable[[OptimizedLevel], str]) -> list[PlatformNote]:
    """The note, when some artifact shows the behaviour: evidence is, per artifact, the first level
    that shows it ('<artifact> at <level>: <what>'). No evidence, no note."""
    evidence = []
    for artifact, per_level in optimized.items():
        level = _first(per_level, shows)
        if level:
            evidence.append(f"{artifact} at {level}: {describe(per_level[level])}")
    return [PlatformNote(topic=topic, chapter=chapter, here=here, evidence=evidence)] if evidence else []


def platform_notes(optimized: dict[str, dict[str, OptimizedLevel]], cpu: CpuInfo) -> list[PlatformNote]:
    notes: list[PlatformNote] = []
    on_arm = cpu.arch in ARM

    if not on_arm:
        notes += _observed(
            optimized, topic="activation dtype",
            chapter="on arm64 QDQIsInt8Allowed() is true: the fused int8 kernels keep the file's int8 activations",
            here=f"{cpu.arch}: QDQIsInt8Allowed() is false, so QDQS8ToU8Transformer rewrites int8 activations "
                 "to uint8 (zero point + 128) before the QDQ fusion; the arithmetic is the same, the kernel is u8s8",
            shows=lambda ol: ol.kernel_activation_dtypes.get("uint8", 0) > 0 and any(
                r.kind == "s8_to_u8" or "run as uint8" in r.summary for r in (ol.diff.rewrites if ol.diff else [])),
            describe=lambda ol: f"{ol.kernel_activation_dtypes.get('uint8', 0)} int8 kernel(s) take uint8 activations")
    notes += _observed(
        optimized, topic="NCHWc",
        chapter="NchwcTransformer needs MlasNchwcGetBlockSize() > 1, true only on x86-64; not measured on arm64",
        here="fp32 Conv (and pooling) run in the blocked NCHWc layout from the layout level on",
        shows=lambda ol: ol.layout.nchwc_nodes > 0,
        describe=lambda ol: f"{ol.layout.nchwc_nodes} com.microsoft.nchwc.* nodes, {ol.layout.reorders} reorders")
    notes += _observed(
        optimized, topic="NHWC beyond QLinearConv",
        chapter="at the layout level only QLinearConv is switched to NHWC",
        here="MaxPool on int8 data also runs channels-last (com.microsoft.NhwcMaxPool)",
        shows=lambda ol: ol.op_histogram.get("com.microsoft.NhwcMaxPool", 0) > 0,
        describe=lambda ol: f"com.microsoft.NhwcMaxPool x{ol.op_histogram['com.microsoft.NhwcMaxPool']}")

    if not on_arm and any(ol.int8_coverage for per in optimized.values() for ol in per.values()):
        isa = cpu.isa
        vnni = isa.get("avx512_vnni") or isa.get("avx_vnni") or isa.get("amx_int8")
        notes.append(PlatformNote(
            topic="int8 dot product",
            chapter="arm64 int8 kernels use the sdot/udot (dotprod) instructions",
            here=("VNNI is present (vpdpbusd): u8s8 products accumulate in 32 bits, no saturation"
                  if vnni else
                  "no VNNI: MLAS uses vpmaddubsw, whose 16-bit intermediate sums can saturate with u8s8; "
                  "ORT recommends reduce_range for weights on such CPUs"),
            evidence=[f"cpu flags: " + ", ".join(k for k, v in isa.items() if v and ("avx" in k or "amx" in k))],
        ))
    return notes
