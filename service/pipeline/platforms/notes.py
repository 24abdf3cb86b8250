"""The chapter's arm64 statements, checked on arm64: the platform notes that this machine can only
read from ORT's source get the evidence an emulated arm64 run measured, and what emulation cannot
show (timing, the MLAS kernel chosen at run time) stays marked as not measured."""

from __future__ import annotations

from service.pipeline.verdict.platform_notes import CHAPTER_INT8, CHAPTER_NCHWC, CHAPTER_SOURCE_ONLY, NOT_IN_CHAPTER
from service.schemas.levels import PlatformNote
from service.schemas.platforms import PlatformReport

__all__ = ["notes_with_platforms"]


def _int8_evidence(p: PlatformReport) -> list[str]:
    out = []
    for artifact, per_level in p.optimized.items():
        ol = next((per_level[lv] for lv in ("extended", "layout", "all") if lv in per_level
                   and not per_level[lv].error), None)
        if ol is None or not ol.int8_kernels:
            continue
        out.append(f"measured on {p.name} (emulated onnxruntime {p.onnxruntime}, {p.qemu_cpu}): {artifact} at "
                   f"{ol.level}: int8 kernels by activation dtype {ol.kernel_activation_dtypes}, int8 coverage "
                   f"{ol.int8_coverage:.2f}" if ol.int8_coverage is not None else "")
    return [e for e in out if e]


def _nchwc_evidence(p: PlatformReport) -> list[str]:
    seen = [f"{a} at {lv}" for a, per in p.optimized.items() for lv, ol in per.items() if ol.layout.nchwc_nodes]
    levels = sorted({lv for per in p.optimized.values() for lv in per if lv in ("layout", "all")})
    if not levels:
        return []
    return [f"measured on {p.name} (emulated onnxruntime {p.onnxruntime}): " + (
        f"com.microsoft.nchwc.* nodes in {', '.join(seen)}" if seen else
        f"no com.microsoft.nchwc.* node in any artifact at {', '.join(levels)}")]


def notes_with_platforms(notes: list[PlatformNote], platforms: dict[str, PlatformReport]) -> list[PlatformNote]:
    # arm64 under qemu only: a target (QNN, OpenVINO, an ORT release) on an ARM host is not the chapter's evidence
    ran = [p for p in platforms.values() if p.status == "ok" and p.rules.int8_allowed and p.kind == "emulated"]
    if not ran:
        return notes
    out = []
    topics = {n.topic for n in notes}
    for note in notes:
        extra = []
        for p in ran:
            if note.topic == "activation dtype":
                extra += _int8_evidence(p)
            elif note.topic == "NCHWc":
                extra += _nchwc_evidence(p)
        out.append(note.model_copy(update={"evidence": note.evidence + extra}) if extra else note)
    for p in ran:
        if "activation dtype" not in topics and _int8_evidence(p):
            out.append(PlatformNote(topic="activation dtype", chapter=f"{CHAPTER_SOURCE_ONLY} {CHAPTER_INT8}",
                                    here="no QDQS8ToU8Transformer rewrite here for this model; arm64 measured below",
                                    evidence=_int8_evidence(p)))
        if "NCHWc" not in topics and _nchwc_evidence(p):
            out.append(PlatformNote(topic="NCHWc", chapter=f"{CHAPTER_SOURCE_ONLY} {CHAPTER_NCHWC}",
                                    here="no NCHWc node here for this model; arm64 measured below",
                                    evidence=_nchwc_evidence(p)))
        out.append(PlatformNote(
            topic=f"{p.name}: kernels and timing",
            chapter=NOT_IN_CHAPTER,
            here=f"not measured: emulated. The graphs and outputs above are {p.name}'s ORT under qemu-user; which MLAS "
                 "kernel runs (dotprod, i8mm, SVE) and how fast cannot be measured under emulation",
            evidence=[f"{p.name}: latency {p.latency}"]))
    return out
