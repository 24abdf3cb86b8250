"""``Report.cost``: the job's seconds in fp32 inferences, and the evaluate stage split by level and artifact
from each level graph's measured wall time (issue 16: a user of a real-size model sees what a job costs
and which options make it cheaper, from what this job measured)."""

from __future__ import annotations

import pytest

from service.pipeline.verdict.job_cost import HINT_ABOVE_S, job_cost


@pytest.fixture(scope="module")
def timed(compared):
    return compared("conv_relu", latency={"runs": 3, "warmup": 2})


def test_the_unit_is_fp32_s_median_at_the_highest_level_timed(timed):
    report, _ = timed
    cost = report.cost
    fp32_all = report.artifacts["fp32"].optimized["all"].latency
    assert cost.fp32_inference_ms == fp32_all.median_ms
    assert cost.job_seconds == pytest.approx(sum(report.timings.values()), abs=1e-3)
    assert cost.inference_times == pytest.approx(cost.job_seconds * 1000 / cost.fp32_inference_ms, rel=1e-3)
    assert cost.stages["evaluate"] == pytest.approx(report.timings["evaluate"] * 1000 / cost.fp32_inference_ms,
                                                    rel=1e-2)


def test_the_evaluate_split_adds_up_the_level_graphs_within_the_stage(timed):
    report, _ = timed
    cost = report.cost
    per_graph = [ol.evaluate_seconds for a in report.artifacts.values() for ol in a.optimized.values()]
    assert all(s is not None and s >= 0 for s in per_graph)
    assert sum(cost.evaluate_by_level.values()) == pytest.approx(sum(per_graph), abs=0.01)
    assert sum(cost.evaluate_by_artifact.values()) == pytest.approx(sum(per_graph), abs=0.01)
    # a graph's seconds hold its accuracy runs and, where timed, its latency runs (levels.py: "latency adds to them")
    assert 0 < sum(per_graph) <= report.timings["evaluate"] + report.timings.get("latency", 0.0) + 0.01
    # A level's seconds hold its timed runs: at least half of them last the median or longer.
    for art in report.artifacts.values():
        for ol in art.optimized.values():
            if ol.latency is not None and not ol.latency.timed_with:
                assert ol.evaluate_seconds * 1000 >= (ol.latency.runs // 2) * ol.latency.median_ms


def test_a_long_job_gets_hints_from_the_seconds_it_measured(timed):
    report, _ = timed
    options = report.options
    short = job_cost(dict(report.timings), report.artifacts, options)
    assert short.hints == []  # a few seconds: nothing worth cutting
    long_timings = {**report.timings, "evaluate": HINT_ABOVE_S, "latency": 0.0}
    # ort_qoperator made to dominate the evaluate stage, as the QOperator graphs of a real CNN do on x86.
    arts = dict(report.artifacts)
    qop = arts["ort_qoperator"]
    arts["ort_qoperator"] = qop.model_copy(update={"optimized": {
        lv: ol.model_copy(update={"evaluate_seconds": 25.0 if not ol.same_graph_as else 0.0})
        for lv, ol in qop.optimized.items()}})
    cost = job_cost(long_timings, arts, options)
    # What levels=['all'] alone would have run: each artifact's graph at all, once, where it was measured.
    expected = sum((a.optimized[a.optimized["all"].same_graph_as or "all"].evaluate_seconds or 0.0)
                   for a in arts.values())
    levels_hint = next(h for h in cost.hints if h.startswith("options.levels ['all'] alone"))
    assert f"took {expected:.1f} s of its {HINT_ABOVE_S:.1f} s" in levels_hint
    artifact_hint = next(h for h in cost.hints if h.startswith("ort_qoperator took"))
    assert "options.artifacts ['pt2e_qdq', 'ort_qdq']" in artifact_hint


def test_without_latency_there_is_no_unit_but_the_split_stays(compared):
    report, _ = compared("conv_relu")
    cost = report.cost
    assert cost.fp32_inference_ms is None and cost.inference_times is None and cost.stages == {}
    assert set(cost.evaluate_by_level) == {"disable_all", "basic", "extended", "layout", "all"}


def test_the_cost_and_its_hints_on_the_cli_summary_and_the_page(timed):
    import time

    from service.jobs.spec import JobSpec
    from service.jobs.store import JobRecord
    from service.render.page import render_job_page
    from service.render.text import summary_table

    report, _ = timed
    long = report.model_copy(update={"cost": job_cost({**report.timings, "evaluate": HINT_ABOVE_S},
                                                      report.artifacts, report.options)})
    text = summary_table(long)
    assert f"= {long.cost.inference_times:.0f} fp32 inferences of" in text
    assert "  cheaper: options.levels ['all'] alone" in text
    rec = JobRecord(id="a" * 32, status="succeeded", spec=JobSpec(id="a" * 32, model_name="m"), cache_key=None,
                    created_at=time.time(), started_at=None, finished_at=None, stage=None, done=0, total=0,
                    error=None, attempts=1)
    page = render_job_page(rec, long, [])
    assert 'id="job-cost"' in page and "To make it cheaper: options.levels" in page
    assert "fp32 inferences" in page and "evaluate by level" in page
