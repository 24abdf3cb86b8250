"""Where this machine differs from the course chapter (measured on arm64 / ORT 1.30).

Each note is derived from what the levels stage (and the advice re-runs) observed for *this*
model, never asserted from the architecture alone: a note appears only when the optimized graphs
show the behaviour. A note that cites the chapter quotes it word for word (``chapter`` holds the
quote, in the chapter's language, then an English gloss after " / "); a note the chapter says
nothing about says so instead of inventing a claim.
"""

from __future__ import annotations

from service.schemas.levels import OptimizedLevel, PlatformNote
from service.schemas.report import CpuInfo

ARM = ("aarch64", "arm64", "ARM64")

# The chapter's own words (shared/seeds), quoted exactly; tests check each is in the seed text.
CHAPTER_SOURCE_ONLY = "（讀原始碼；這兩點都沒有在 x86 上實測）"
CHAPTER_INT8 = ("QDQIsInt8Allowed()的預設值在 arm 是允許、在其他平台是不允許。不允許時，Level2 先跑"
                "QDQS8ToU8Transformer，把 int8 activation 改成 uint8。")
CHAPTER_NCHWC = "NchwcTransformer的條件是MlasNchwcGetBlockSize() > 1，只有 x86-64 成立。"
CHAPTER_NHWC = "M09-2、M09-3：只有 QLinearConv 換成 NHWC"
CHAPTER_SAVE_WARNING = "ORT 存最佳化後的圖時，等級高於 EXTENDED 會印警告：圖可能含硬體相關的最佳化，只能在同樣的環境用。"
NOT_IN_CHAPTER = "(the chapter says nothing about this)"


def _first(per_level: dict[str, OptimizedLevel], pred) -> str | None:
    for level, ol in per_level.items():
        if ol.error is None and pred(ol):
            return level
    return None


def _first_level_evidence(optimized: dict[str, dict[str, OptimizedLevel]], pred, describe) -> list[str]:
    """'<artifact> at <level>: <describe(level)>' at each artifact's first level where ``pred`` holds."""
    out = []
    for artifact, per_level in optimized.items():
        level = _first(per_level, pred)
        if level:
            out.append(f"{artifact} at {level}: {describe(per_level[level])}")
    return out


def platform_notes(optimized: dict[str, dict[str, OptimizedLevel]], cpu: CpuInfo,
                   advice_measured: list | None = None) -> list[PlatformNote]:
    """``advice_measured``: every advice entry (proposed and refuted); the
    ``session.qdqisint8allowed=1`` re-runs give the coverage this model would have where int8 is allowed."""
    notes: list[PlatformNote] = []
    on_arm = cpu.arch in ARM

    evidence = []
    for artifact, per_level in optimized.items():
        level = _first(per_level, lambda ol: ol.kernel_activation_dtypes.get("uint8", 0) > 0 and any(
            r.kind == "s8_to_u8" or "run as uint8" in r.summary for r in (ol.diff.rewrites if ol.diff else [])))
        if level:
            n = per_level[level].kernel_activation_dtypes.get("uint8", 0)
            evidence.append(f"{artifact} at {level}: {n} int8 kernel(s) take uint8 activations")
        top = next((per_level[lv] for lv in ("all", "layout", "extended") if lv in per_level
                    and per_level[lv].error is None), None)
        if top is not None and level:  # only where QDQS8ToU8Transformer rewrote something
            shared = sum(1 for r in top.unfused if r.blocker in ("io_dtype_mismatch", "int8_activation_on_x86"))
            if shared:
                evidence.append(f"{artifact} at {top.level}: {shared} nodes stay float because a tensor read by "
                                "several nodes kept int8 (see the blockers)")
    for a in advice_measured or []:
        if a.change == {"session": {"session.qdqisint8allowed": "1"}} and a.measured is not None \
                and (a.measured.after.int8_coverage or 0) > (a.measured.before.int8_coverage or 0):
            b, f = a.measured.before, a.measured.after
            evidence.append(f"{a.artifact} at {f.level}: int8 coverage {b.int8_coverage:.2f} here, "
                            f"{f.int8_coverage:.2f} with session.qdqisint8allowed=1 (as where int8 is allowed); "
                            f"latency {b.latency_ms:.2f} ms vs {f.latency_ms:.2f} ms (s8s8 kernels)")
    if evidence and not on_arm:
        notes.append(PlatformNote(
            topic="activation dtype",
            chapter=f"{CHAPTER_SOURCE_ONLY} {CHAPTER_INT8} / (read from the source, not measured on x86) "
                    "QDQIsInt8Allowed() defaults to allowed on arm, not allowed elsewhere; then Level2 first runs "
                    "QDQS8ToU8Transformer, turning int8 activations into uint8.",
            here=f"measured on {cpu.arch}: QDQS8ToU8Transformer converts a Q/DQ pair only when the QuantizeLinear "
                 "has one reader; after EnsureUniqueDQForNodeUnit a tensor read by several nodes has one DQ per "
                 "reader, so it stays int8, and the Conv/MatMul/Add/Mul/Concat/Sigmoid selectors then see int8 "
                 "next to uint8 (or int8 where only uint8 is allowed) and leave the node in float",
            evidence=evidence,
        ))

    evidence = _first_level_evidence(
        optimized, lambda ol: ol.layout.nchwc_nodes > 0,
        lambda ol: f"{ol.layout.nchwc_nodes} com.microsoft.nchwc.* nodes, {ol.layout.reorders} reorders")
    if evidence:
        notes.append(PlatformNote(
            topic="NCHWc",
            chapter=f"{CHAPTER_SOURCE_ONLY} {CHAPTER_NCHWC} / (read from the source, not measured on x86) "
                    "NchwcTransformer requires MlasNchwcGetBlockSize() > 1, true only on x86-64.",
            here="measured: fp32 Conv (and pooling) run in the blocked NCHWc layout from the layout level on",
            evidence=evidence,
        ))

    evidence = _first_level_evidence(
        optimized, lambda ol: ol.op_histogram.get("com.microsoft.NhwcMaxPool", 0) > 0,
        lambda ol: f"com.microsoft.NhwcMaxPool x{ol.op_histogram['com.microsoft.NhwcMaxPool']}")
    if evidence:
        notes.append(PlatformNote(
            topic="NHWC beyond QLinearConv",
            chapter=f"{CHAPTER_NHWC} / M09-2, M09-3: only QLinearConv is switched to NHWC",
            here="MaxPool on 8-bit data also runs channels-last (com.microsoft.NhwcMaxPool). ORT's NhwcTransformer "
                 "has no CPU-architecture condition for it, so this is not an x86-vs-arm64 difference; the chapter "
                 "used ORT 1.30 and its own graphs",
            evidence=evidence,
        ))

    saved_above = sorted({f"{a} at {lv}" for a, per in optimized.items() for lv, ol in per.items()
                          if lv in ("layout", "all") and ol.error is None and ol.file
                          and (ol.layout.nchwc_nodes or ol.layout.nhwc_nodes)})
    if saved_above:
        notes.append(PlatformNote(
            topic="saved graphs above extended",
            chapter=f"{CHAPTER_SAVE_WARNING} / When ORT saves an optimized graph above EXTENDED it warns: the graph "
                    "may hold hardware-specific optimizations and is only for the same environment.",
            here=f"the layout/all files among the artifacts hold rewrites for this CPU ({cpu.arch}) and may not load "
                 "or may run differently elsewhere; ORT's warning is logged when they are saved (the service keeps "
                 "ORT's log quiet). ORT's default level is all (ORT_ENABLE_ALL)",
            evidence=saved_above[:6],
        ))

    if not on_arm and any(ol.int8_coverage for per in optimized.values() for ol in per.values()):
        isa = cpu.isa
        vnni = isa.get("avx512_vnni") or isa.get("avx_vnni") or isa.get("amx_int8")
        notes.append(PlatformNote(
            topic="int8 dot product",
            chapter=NOT_IN_CHAPTER,
            here=("VNNI is present (vpdpbusd): u8s8 products accumulate in 32 bits, no saturation"
                  if vnni else
                  "no VNNI: MLAS uses vpmaddubsw, whose 16-bit intermediate sums can saturate with u8s8; "
                  "ORT recommends reduce_range for weights on such CPUs"),
            evidence=[f"cpu flags: " + ", ".join(k for k, v in isa.items() if v and ("avx" in k or "amx" in k))],
        ))
    return notes
