"""Lints from the targets of ``options.platforms``: a file a target refuses, a silent fallback to ORT's CPU EP,
nodes a target leaves to the CPU EP, and graphs another ORT release writes differently. Each carries the
target's own reason (the codes are registered in verdict/lints/__init__.py, written_elsewhere, and listed in docs/lints.md)."""

from __future__ import annotations

from service.pipeline.platforms.targets.ort_release import MISSING_LEVEL
from service.pipeline.platforms.targets.hints import short_error
from service.schemas.levels import Lint
from service.schemas.platforms import PlatformReport

__all__ = ["target_lints"]


def _compiled_lints(name: str, p: PlatformReport) -> list[Lint]:
    out = []
    for artifact, art in p.artifacts.items():
        if art.fallback:
            out.append(Lint(code="target_silent_fallback", severity="error", artifact=artifact,
                            message=f"{name}: {art.fallback}", hint=art.hint, source=p.target))
        elif art.status != "ok":
            out.append(Lint(code="target_compile_failed", severity="error", artifact=artifact,
                            message=f"{name} does not compile {artifact}: {short_error(art.error or '', 400)}",
                            hint=art.hint, source=p.target))
        elif art.nodes_left and p.kind == "qnn":
            reasons = sorted({n.reason for n in art.nodes_left})
            out.append(Lint(code="target_nodes_left", severity="info", artifact=artifact,
                            message=f"{name} takes {art.nodes_taken} of {art.nodes_total} nodes of {artifact}; the "
                                    f"{len(art.nodes_left)} left run on ORT's CPU EP: {'; '.join(reasons)[:400]}",
                            hint="QNN's reasons are its own (op trace): graph I/O Q/DQ stay on the CPU by default "
                                 "(offload_graph_io_quantization)", source=p.target))
    return out


def _release_lints(name: str, p: PlatformReport) -> list[Lint]:
    out, missing = [], set()
    for row in p.side_by_side:
        if row.same:
            continue
        if any(MISSING_LEVEL in d for d in row.differences):
            missing.add(row.level)
            continue
        fused = [d for d in row.differences if " fuses " in d] or row.differences[:1]
        if fused:
            out.append(Lint(code="target_fuses_differently", severity="warning", artifact=row.artifact,
                            message="; ".join(fused)[:600],
                            hint=f"a deployment on onnxruntime {p.onnxruntime} runs this graph, not this machine's: "
                                 f"check its accuracy and latency in platforms.{name}",
                            source=f"onnxruntime {p.onnxruntime}"))
    for art in p.artifacts.values():
        if art.status != "ok":
            out.append(Lint(code="target_compile_failed", severity="error",
                            message=f"{name} cannot load a file: {short_error(art.error or '', 400)}", hint=art.hint,
                            source=f"onnxruntime {p.onnxruntime}"))
    if missing:
        out.append(Lint(code="target_level_missing", severity="info",
                        message=f"{name}: {', '.join(sorted(missing))} not run: onnxruntime {p.onnxruntime} has no such "
                                "level (ORT_ENABLE_LAYOUT came in 1.23)",
                        hint="compare the release at the levels it has", source=f"onnxruntime {p.onnxruntime}"))
    return out


def target_lints(platforms: dict[str, PlatformReport]) -> list[Lint]:
    out: list[Lint] = []
    for name, p in platforms.items():
        if p.status != "ok":
            continue
        if p.kind in ("qnn", "openvino"):
            out += _compiled_lints(name, p)
        elif p.kind == "ort":
            out += _release_lints(name, p)
    return out
