"""An ONNX Runtime release beside this machine's (``ort:<version>``): the same level graphs as arm64's, made by
that release here, natively (so timed), and what differs from this machine's ORT named op by op.

Measured (shared notes, targets.md): 1.23.2 and 1.24.4 write the same graphs as 1.32.0 on the built-in examples;
1.22.1 fuses one Conv less into QLinearConv on the PT2E file at extended/all, 1.20 also leaves the Gemm, and
releases before 1.23 have no layout level.
"""

from __future__ import annotations

from service.schemas.levels import OptimizedLevel
from service.schemas.platforms import PlatformReport, TargetArtifact

__all__ = ["MISSING_LEVEL", "histogram_differences", "release_summary"]

MISSING_LEVEL = "has no layout level"  # emulated_ort.py's words for a level the release lacks


def _short(op: str) -> str:
    return op  # op_histogram keys: "Conv", "com.microsoft.QLinearConv" (domain kept: the two differ)


def histogram_differences(name: str, artifact: str, level: str, ours: OptimizedLevel, theirs: OptimizedLevel,
                          host_version: str) -> list[str]:
    """Each way ``theirs`` (the release's graph) differs from ``ours`` (this machine's) in words: compute ops
    left in float (fused less or more), then the op counts that differ."""
    out = []
    for op in sorted(set(ours.compute_ops_float) | set(theirs.compute_ops_float)):
        d = theirs.compute_ops_float.get(op, 0) - ours.compute_ops_float.get(op, 0)
        if d:
            out.append(f"{name} fuses {abs(d)} {_short(op)} {'less' if d > 0 else 'more'} on {artifact} at {level} "
                       f"than onnxruntime {host_version} ({_short(op)} in float: {theirs.compute_ops_float.get(op, 0)} "
                       f"vs {ours.compute_ops_float.get(op, 0)} here)")
    changed = [f"{_short(op)} {theirs.op_histogram.get(op, 0)} vs {ours.op_histogram.get(op, 0)}"
               for op in sorted(set(ours.op_histogram) | set(theirs.op_histogram))
               if theirs.op_histogram.get(op, 0) != ours.op_histogram.get(op, 0)]
    if changed:
        out.append(f"{name} writes a different {artifact} graph at {level} (there vs here): {', '.join(changed)}")
    return out


def release_summary(report: PlatformReport) -> PlatformReport:
    """``artifacts.<name>`` of an ORT release: status (a level the release could not load fails the file; a
    level it does not have does not), ``op_histogram`` per level, the accuracy and latency of its last level."""
    if report.status != "ok":
        return report
    artifacts = {}
    for name, per_level in report.optimized.items():
        failed = [f"{lv}: {ol.error}" for lv, ol in per_level.items()
                  if ol.error and not ol.op_histogram and MISSING_LEVEL not in ol.error]
        ran = [ol for ol in per_level.values() if ol.op_histogram]
        last = ran[-1] if ran else None
        timed = [ol.latency for ol in ran if ol.latency is not None]
        artifacts[name] = TargetArtifact(
            status="failed" if failed else "ok", error="; ".join(failed)[:3000] or None,
            hint="this release could not load the file at these levels: the message is ORT's own" if failed else None,
            op_histogram={lv: dict(ol.op_histogram) for lv, ol in per_level.items() if ol.op_histogram},
            nodes_taken=last.node_count if last else None, nodes_total=last.node_count if last else None,
            numerics=last.numerics if last else None, latency=timed[-1] if timed else None)
    latency = "measured: at the job's latency levels, in optimized.<artifact>.<level>.latency (one thread, natively)"
    return report.model_copy(update={"artifacts": artifacts, "latency": latency})
