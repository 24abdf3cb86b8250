"""Accuracy on every core the job has (issue 39): the figures are the same whatever the core count."""

from __future__ import annotations

import threading

import numpy as np

from service.pipeline.runtime.levels import LevelsInput, LevelsRun, analyze_levels
from service.pipeline.runtime.parallel_runs import runs_on_cores
from service.schemas.options import ComparisonOptions

# Wall times, and what ORT's NchwcTransformer (x86) writes in an order and with node names that vary per
# session (level_graphs.py), compared below by what does not depend on that order.
VOLATILE = {"session_seconds", "evaluate_seconds", "nodes", "diff"}


def _feeds(report, n=4):
    shape = report.model.resolved_input_shapes["x"]
    rng = np.random.default_rng(3)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


def _levels(workdir, report, tmp_path, *, cores, shared=None, name=None):
    options = ComparisonOptions(levels=["disable_all", "basic", "all"], latency={"enabled": False})
    art = workdir / "artifacts"
    paths = {a: art / f"{a}.onnx" for a in ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator")}
    return analyze_levels(LevelsInput(artifact_paths=paths, eval_feeds=_feeds(report), options=options),
                          LevelsRun(out_dir=tmp_path / (name or f"c{cores}"), cores=cores, keep_level_graphs=False,
                                    disable_all_runs=shared))


def test_accuracy_figures_are_identical_on_one_core_and_on_two(compared, tmp_path):
    report, workdir = compared("op_zoo_net")
    one = _levels(workdir, report, tmp_path, cores=1)
    two = _levels(workdir, report, tmp_path, cores=2)
    assert list(two.optimized) == list(one.optimized)  # fp32 first, then the artifacts in order
    for art, per_level in one.optimized.items():
        for level, ol in per_level.items():
            other = two.optimized[art][level]
            assert ol.numerics is not None
            # every figure, bit for bit: each feed ran on one thread either way
            assert other.model_dump(exclude=VOLATILE) == ol.model_dump(exclude=VOLATILE), (art, level)
    assert [a.model_dump() for a in two.agreement] == [a.model_dump() for a in one.agreement]
    for a, b in zip(one.reference_outputs, two.reference_outputs):
        np.testing.assert_array_equal(a, b)


def test_runs_on_cores_uses_the_cores_and_keeps_the_feed_order():
    seen, barrier = set(), threading.Barrier(2, timeout=10)

    def run(feed):
        barrier.wait()  # both threads are in a run at once, or this times out
        seen.add(threading.current_thread().name)
        return [feed["i"] * 2]

    out = runs_on_cores(run, [{"i": i} for i in range(4)], cores=2)
    assert out == [[0], [2], [4], [6]] and len(seen) == 2
    # a graph with random ops runs its feeds one after the other, on the caller's thread
    assert runs_on_cores(lambda f: [threading.current_thread().name], [{}, {}], cores=2, sequential=True) == \
        [[threading.current_thread().name]] * 2


def test_the_per_tensor_table_is_identical_on_one_core_and_on_two(compared):
    from service.pipeline.layers.layers import layers_from_files

    report, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    quantized = {a: art / f"{a}.onnx" for a in ("pt2e_qdq", "ort_qdq", "ort_qoperator")}
    tables = [layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths=quantized, eval_feeds=_feeds(report, 2),
                                cores=cores).model_dump(exclude={"seconds"}) for cores in (1, 2)]
    assert tables[0]["rows"] and tables[0] == tables[1]


def test_the_table_s_first_samples_are_the_accuracy_runs_at_disable_all(compared, tmp_path):
    """Exact reuse (issue 47): run once, the per-tensor table's first samples give each file's accuracy at
    disable_all bit for bit, and the table goes on from there with the same figures as a table of its own."""
    from service.pipeline.layers.layers import TensorTable, layers_from_files
    from service.pipeline.runtime.numerics import concat_runs

    report, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    quantized = {a: art / f"{a}.onnx" for a in ("pt2e_qdq", "ort_qdq", "ort_qoperator")}
    feeds = _feeds(report)
    table = TensorTable(fp32_path=art / "fp32.onnx", artifact_paths=quantized)

    def shared():
        kept = table.first_outputs(feeds)
        return {n: (table.outputs[n], concat_runs([[d[o] for o in table.outputs[n]] for d in per]))
                for n, per in kept.items()}

    alone = _levels(workdir, report, tmp_path, cores=1)
    reused = _levels(workdir, report, tmp_path, cores=1, shared=shared, name="reused")
    assert table.reused == len(feeds)
    for name, per_level in alone.optimized.items():
        for level, ol in per_level.items():
            assert ol.numerics is not None
            assert reused.optimized[name][level].model_dump(exclude=VOLATILE) == ol.model_dump(exclude=VOLATILE)
    for a, b in zip(alone.reference_outputs, reused.reference_outputs):
        np.testing.assert_array_equal(a, b)
    own = layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths=quantized, eval_feeds=feeds)
    went_on = table.completed(feeds)
    assert went_on.rows == own.rows and went_on.samples == own.samples
    assert went_on.sampling.reused_samples == len(feeds) and any("run once, for both" in n for n in went_on.notes)
