"""What a job cost, in the unit of its model: fp32 inference-times (issue 16).

One fp32 inference is fp32's median latency at the highest level that was timed, on the latency
protocol's threads: a real-size model's job is judged in that unit, since most of its stages run the
model. Every figure here is a measured wall time: the stages' from ``Report.timings``, the evaluate
stage's per level graph from ``OptimizedLevel.evaluate_seconds`` (that session's evaluation runs,
latency top-ups and numerics). The hints add up the measured seconds of the graphs a smaller option set
would still have run; they predict nothing the job did not measure.
"""

from __future__ import annotations

from service.schemas.options import LEVELS, ComparisonOptions
from service.schemas.report import Artifact, JobCost

__all__ = ["job_cost", "HINT_ABOVE_S", "BIG_SHARE"]

# A job this long gets hints on what to leave out; a shorter one has nothing worth cutting.
HINT_ABOVE_S = 60.0
# An artifact whose graphs took this share of the evaluate stage is named in a hint.
BIG_SHARE = 0.4

HOW = ("seconds are the stages' wall times; one fp32 inference is fp32's median latency at the highest level "
       "timed; the evaluate stage is split by the wall time of each level graph's evaluation runs, latency "
       "top-ups and numerics (a level ORT wrote identically to an earlier one reuses that one's runs: only its "
       "numerics are computed again)")


def _fp32_inference_ms(artifacts: dict[str, Artifact]) -> float | None:
    fp32 = artifacts.get("fp32")
    if fp32 is None:
        return None
    for level in reversed(LEVELS):
        ol = fp32.optimized.get(level)
        if ol is not None and ol.latency is not None:
            return ol.latency.median_ms
    return None


def _evaluate_seconds(art: Artifact, levels: list[str]) -> float:
    """What evaluating ``art`` at ``levels`` alone took in this job: each distinct graph once, at the level
    that measured it (``same_graph_as``: a level ORT wrote like an earlier one reused that one's runs)."""
    measured: set[str] = set()
    total = 0.0
    for level in levels:
        ol = art.optimized.get(level)
        if ol is None:
            continue
        source = ol.same_graph_as or level
        if source not in measured:
            measured.add(source)
            total += (art.optimized[source].evaluate_seconds or 0.0) if source in art.optimized else 0.0
    return total


def _hints(artifacts: dict[str, Artifact], options: ComparisonOptions, evaluate_s: float,
           by_artifact: dict[str, float], ms: float | None) -> list[str]:
    hints = []
    levels = [lv for lv in LEVELS if lv in options.levels]
    if len(levels) > 1 and "all" in levels:
        only_all = sum(_evaluate_seconds(a, ["all"]) for a in artifacts.values())
        hints.append(f"options.levels ['all'] alone (ORT's default, what most deployments run): the evaluate "
                     f"stage's graphs at that level took {only_all:.1f} s of its {evaluate_s:.1f} s here; the "
                     f"report then describes that level only")
    quantized = {a: s for a, s in by_artifact.items() if a != "fp32"}
    if len(quantized) > 1 and evaluate_s > 0:
        name, seconds = max(quantized.items(), key=lambda kv: kv[1])
        if seconds >= BIG_SHARE * evaluate_s:
            at_all = artifacts[name].optimized.get("all")
            slower = (f"; at level all one run takes {at_all.latency.median_ms / ms:.1f}x fp32's"
                      if ms and at_all is not None and at_all.latency is not None else "")
            others = [a for a in options.artifacts if a != name]
            hints.append(f"{name} took {seconds:.1f} s of the evaluate stage's {evaluate_s:.1f} s{slower}: "
                         f"options.artifacts {others} leaves it out when its figures are not needed")
    return hints


def job_cost(timings: dict[str, float], artifacts: dict[str, Artifact], options: ComparisonOptions) -> JobCost:
    ms = _fp32_inference_ms(artifacts)
    job_s = float(sum(timings.values()))
    by_level = {lv: round(sum(a.optimized[lv].evaluate_seconds or 0.0 for a in artifacts.values()
                              if lv in a.optimized), 3)
                for lv in LEVELS if any(lv in a.optimized for a in artifacts.values())}
    by_artifact = {name: round(sum(ol.evaluate_seconds or 0.0 for ol in a.optimized.values()), 3)
                   for name, a in artifacts.items() if a.optimized}
    evaluate_s = float(timings.get("evaluate", 0.0))
    return JobCost(
        fp32_inference_ms=ms, job_seconds=round(job_s, 3),
        inference_times=round(job_s * 1000.0 / ms, 1) if ms else None,
        stages={k: round(v * 1000.0 / ms, 1) for k, v in timings.items()} if ms else {},
        evaluate_by_level=by_level, evaluate_by_artifact=by_artifact, how=HOW,
        hints=_hints(artifacts, options, evaluate_s, by_artifact, ms) if job_s >= HINT_ABOVE_S else [],
    )
