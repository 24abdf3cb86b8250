"""Per-tensor SQNRs carry their uncertainty (issue 40): a 95% bootstrap interval per cell, a sample count
that adapts until the intervals are at most 2 dB wide, and a worst tensor named with its interval.

Two samples (the old default) put 9 of op_zoo_net's 16 tensors more than 2 dB from a 64-sample
figure, up to 6.7 dB. Oracle: ``bench/layers_ci.py``'s independent figure, 64 fresh samples through
plain ONNX Runtime (the bench runs it on two more models)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest



@pytest.fixture(scope="module")
def layers_ci():
    import bench.layers_ci  # the bench's own independent figure (the repo root is on sys.path)

    return bench.layers_ci


def test_an_independent_64_sample_figure_lies_in_the_interval_or_within_1_db(compared, layers_ci):
    """The interval method, on a table run to its width target (depth full's table: no settled stop, no
    extras' budget). The default table stops sooner, once its ranking is settled; at 12 samples its
    percentile intervals held 86% of these cells, not 90%: the ranking, not each cell, is what it settles."""
    from service.pipeline.layers.layers import LayersBudget, layers_from_files

    report, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    rng = np.random.default_rng(11)
    shape = report.model.resolved_input_shapes["x"]
    feeds = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(1024)]
    layers = layers_from_files(fp32_path=art / "fp32.onnx",
                               artifact_paths={a: art / f"{a}.onnx" for a in ("pt2e_qdq", "ort_qdq", "ort_qoperator")},
                               eval_feeds=feeds, budget=LayersBudget(stop_when_settled=False, max_seconds=120))
    rows = layers_ci.judged(report.model_copy(update={"layers": layers}),
                            layers_ci.independent_figures(report, art, samples=64))
    assert len(rows) >= 40  # every cell with a finite SQNR has an interval
    held = sum(r["holds"] for r in rows) / len(rows)
    assert held >= 0.9, [r for r in rows if not r["holds"]]
    # The samples adapted until every interval was at most 2 dB wide, or say why they stopped short.
    s = layers.sampling
    assert layers.samples > report.options.eval_samples and f"{layers.samples} samples" in s.interval
    if s.stopped.startswith("every interval"):
        assert s.widest_db <= 2.0 and s.over_target == 0
    else:
        assert "max_samples" in s.stopped or "max_seconds" in s.stopped or "every sample given" in s.stopped


def test_the_interval_is_seeded_and_bounds_the_figure(compared):
    from service.pipeline.layers.layers import LayersBudget, layers_from_files

    report, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    rng = np.random.default_rng(5)
    shape = report.model.resolved_input_shapes["x"]
    feeds = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(12)]

    def table(seed):
        return layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths={"ort_qdq": art / "ort_qdq.onnx"},
                                 eval_feeds=feeds, budget=LayersBudget(min_samples=12, max_samples=12), seed=seed)

    first, again, other = table(0), table(0), table(1)
    cells = lambda t: {r.tensor: r.artifacts["ort_qdq"].sqnr_db_ci for r in t.rows if "ort_qdq" in r.artifacts}  # noqa: E731
    assert cells(first) == cells(again) and cells(first) != cells(other)
    assert first.samples == 12 and "seed 0" in first.sampling.interval
    for r in first.rows:
        c = r.artifacts.get("ort_qdq")
        if c is not None and c.sqnr_db_ci is not None:
            low, high = c.sqnr_db_ci[0], math.inf if c.sqnr_db_ci[1] is None else c.sqnr_db_ci[1]
            assert low <= high and low - 1.0 <= c.sqnr_db <= high + 1.0, (r.tensor, c.sqnr_db, c.sqnr_db_ci)


def test_the_worst_tensor_is_named_with_its_interval_and_an_unsettled_ranking_says_so(compared):
    from service.render.page import render_job_page
    from service.render.text import summary_table
    from service.jobs.spec import JobSpec
    from service.jobs.store import JobRecord

    report, _ = compared("op_zoo_net")
    layers = report.layers
    assert set(layers.worst_detail) == set(layers.worst)
    unsettled = 0
    for a, w in layers.worst_detail.items():
        assert w.tensor == layers.worst[a] and w.sqnr_db_ci is not None
        high = math.inf if w.sqnr_db_ci[1] is None else w.sqnr_db_ci[1]
        overlapping = sorted(r.tensor for r in layers.rows if a in r.artifacts and r.tensor != w.tensor
                             and r.artifacts[a].sqnr_db_ci and r.artifacts[a].sqnr_db_ci[0] <= high)
        assert w.settled == (not overlapping) and sorted(w.overlapping) == overlapping[:10]
        assert f"95% interval {w.sqnr_db_ci[0]:.1f} to" in w.summary
        assert ("ranking not settled" in w.summary) == bool(overlapping)
        unsettled += not w.settled
    text = summary_table(report)
    rec = JobRecord(id="c" * 32, status="succeeded", spec=JobSpec(id="c" * 32, model_name="zoo"), cache_key=None,
                    created_at=time.time(), started_at=None, finished_at=None, stage=None, done=0, total=0,
                    error=None, attempts=1)
    html = render_job_page(rec, report, [])
    for a, w in layers.worst_detail.items():
        assert f"worst {w.tensor} (" in text and w.summary in text
        assert w.summary.replace("'", "&#39;") in html
    assert f"{layers.samples} samples" in text
    assert unsettled  # op_zoo_net's Transpose/Reshape chain carries its MatMul input's error: intervals overlap


def test_the_ranking_is_settled_once_the_worst_few_stand_apart():
    """The table's answer is which tensors lose the most (issue 47): settled when, in every file, the worst
    1 to 5 tensors' intervals lie apart from the rest's, whatever the width of the others."""
    from service.pipeline.layers.layers import ranking_settled

    points = {("a", "t1"): 10.0, ("a", "t2"): 11.0, ("a", "t3"): 20.0, ("a", "t4"): 21.0}
    apart = {("a", "t1"): (9.0, 11.0), ("a", "t2"): (10.0, 12.5), ("a", "t3"): (15.0, 25.0), ("a", "t4"): (16.0, 40.0)}
    assert ranking_settled(points, apart) == "a: the worst 2 apart from the rest"  # t1 overlaps t2, both clear t3
    mixed = {**apart, ("a", "t3"): (12.0, 14.0)}  # t3's interval reaches down to the worst two
    assert ranking_settled(points, mixed) == "a: the worst 3 apart from the rest"
    assert ranking_settled(points, {k: (0.0, 50.0) for k in points}) is None  # everything overlaps: not settled
    # every file must be settled
    other = {("b", "u1"): 10.0, ("b", "u2"): 10.5}
    assert ranking_settled({**points, **other}, {**apart, ("b", "u1"): (8.0, 12.0), ("b", "u2"): (9.0, 12.0)}) is None
    assert ranking_settled({}, {}) is None


def test_the_table_runs_its_minimum_then_more_only_as_the_extras_budget_pays(compared):
    """The order of spending (issue 47): the minimum samples whatever the budget; past them, more only while
    the extras' budget allows; depth full (no settled stop, no budget) goes on toward the width target."""
    from service.pipeline.layers.layers import LayersBudget, layers_from_files

    report, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    rng = np.random.default_rng(7)
    shape = report.model.resolved_input_shapes["x"]
    feeds = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(64)]
    files = {a: art / f"{a}.onnx" for a in ("pt2e_qdq", "ort_qdq", "ort_qoperator")}

    def table(**budget):
        return layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths=files, eval_feeds=feeds,
                                 budget=LayersBudget(min_samples=6, max_samples=64, **budget))

    asked = []
    spent = table(more_allowed=lambda s: asked.append(s) or False, more_option="set options.extras.seconds",
                  stop_when_settled=False)
    assert spent.samples == 6 and asked and all(s > 0 for s in asked)
    assert spent.sampling.stopped.startswith("the extras' budget spent (set options.extras.seconds")
    full = table(stop_when_settled=False)
    assert full.samples > 6 and not full.sampling.stopped.startswith("ranking settled")
    settled = table()
    # the default stops at the settled ranking (or the width target), never later than depth full
    assert settled.samples <= full.samples
    if settled.sampling.stopped.startswith("ranking settled"):
        assert settled.sampling.settled and settled.sampling.ranking.startswith("ranking settled")
