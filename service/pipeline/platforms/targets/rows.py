"""This machine | a target, each difference named with its reason: for an ORT release, per artifact and level
(the op counts its optimizer writes differently; a level it lacks); for QNN and OpenVINO, per artifact (compiled
or refused and why, nodes left to ORT's CPU EP and why, runtime precision, accuracy against fp32)."""

from __future__ import annotations

from service.pipeline.platforms.targets.ort_release import MISSING_LEVEL, histogram_differences
from service.pipeline.platforms.targets.hints import short_error
from service.schemas.levels import OptimizedLevel
from service.schemas.platforms import PlatformReport, SideBySideRow, TargetArtifact

__all__ = ["SQNR_DIFFERENCE_DB", "release_rows", "target_rows"]

# Below this, two SQNRs are the same figure for the rows (eval-sample noise on the examples is ~0.1 dB).
SQNR_DIFFERENCE_DB = 1.0
NODES_NAMED = 3


def _sqnr(ol: OptimizedLevel | None) -> float | None:
    return ol.numerics.worst_sqnr_db if ol is not None and ol.numerics is not None else None


def release_rows(host: dict[str, dict[str, OptimizedLevel]], rows: list[SideBySideRow], report: PlatformReport,
                 host_version: str) -> list[SideBySideRow]:
    """The arm64-style ``rows`` of an ORT release, each given its differences, plus one row per level the
    release lacks. Same CPU, same two CPU rules: a difference is the release's, never "unexplained"."""
    out = []
    for row in rows:
        ours, theirs = host[row.artifact][row.level], report.optimized[row.artifact][row.level]
        diffs = histogram_differences(report.name, row.artifact, row.level, ours, theirs, host_version)
        same = row.same and not diffs
        out.append(row.model_copy(update={
            "same": same, "differences": diffs, "host_sqnr_db": _sqnr(ours), "platform_sqnr_db": _sqnr(theirs),
            "rules": [] if same else [f"a different ONNX Runtime release on the same CPU: onnxruntime {host_version} "
                                      f"here, {report.onnxruntime} on {report.name}"]}))
    for artifact, per_level in report.optimized.items():
        for level, ol in per_level.items():
            if ol.error and MISSING_LEVEL in ol.error and level in host.get(artifact, {}):
                out.append(SideBySideRow(artifact=artifact, level=level, same=False, host_int8_coverage=None,
                                         platform_int8_coverage=None, differences=[f"{report.name}: {ol.error}"],
                                         rules=[f"{report.name} has no such level: not run there"]))
    return out


def _host_sqnr(host: dict[str, dict[str, OptimizedLevel]], artifact: str) -> float | None:
    per_level = host.get(artifact, {})
    ol = per_level.get("all") or next((per_level[lv] for lv in reversed(list(per_level))), None)
    return _sqnr(ol)


def _differences(name: str, artifact: str, art: TargetArtifact, host_sqnr: float | None) -> list[str]:
    if art.status != "ok":
        if art.fallback:
            return [f"{name}: {artifact}: {art.fallback}"]
        return [f"{name}: {artifact} does not compile: {short_error(art.error or '')}" + (f" ({art.hint})" if art.hint else "")]
    out = []
    if art.nodes_left:
        named = "; ".join(f"{n.node} ({n.op_type}): {n.reason}" for n in art.nodes_left[:NODES_NAMED])
        more = f"; and {len(art.nodes_left) - NODES_NAMED} more" if len(art.nodes_left) > NODES_NAMED else ""
        out.append(f"{name} takes {art.nodes_taken} of {art.nodes_total} nodes of {artifact}; it leaves "
                   f"{len(art.nodes_left)} to ORT's CPU EP: {named}{more}")
    low = {p: n for p, n in art.precision_histogram.items() if p in ("bf16", "f16")}
    if low and artifact == "fp32":
        out.append(f"{name} runs {sum(low.values())} layer(s) of fp32 in {', '.join(low)} (the plugin's default "
                   "inference precision on this CPU)")
    theirs = art.numerics.worst_sqnr_db if art.numerics else None
    if theirs is not None and host_sqnr is not None and abs(theirs - host_sqnr) >= SQNR_DIFFERENCE_DB:
        out.append(f"{artifact}: worst SQNR vs fp32 {theirs:.1f} dB on {name}, {host_sqnr:.1f} dB here (ORT's CPU EP)")
    return out


def target_rows(host: dict[str, dict[str, OptimizedLevel]], report: PlatformReport) -> list[SideBySideRow]:
    """One row per artifact of a QNN or OpenVINO target (level "compiled": the target's own graph)."""
    rows = []
    for artifact, art in report.artifacts.items():
        host_sqnr = _host_sqnr(host, artifact)
        diffs = _differences(report.name, artifact, art, host_sqnr)
        rows.append(SideBySideRow(
            artifact=artifact, level="compiled", same=not diffs, host_int8_coverage=None, platform_int8_coverage=None,
            differences=diffs, host_sqnr_db=host_sqnr,
            platform_sqnr_db=art.numerics.worst_sqnr_db if art.numerics else None,
            rules=[f"{report.name} compiles the file itself ({report.target})"] if diffs else []))
    return rows
