"""A level whose graph ORT wrote byte for byte as at the level before reuses its outputs."""

from __future__ import annotations


def test_identical_graphs_are_labelled_and_keep_identical_numerics(compared):
    report, workdir = compared("conv_relu")
    opt = report.artifacts["ort_qdq"].optimized
    assert opt["all"].same_graph_as == "layout"
    arts = workdir / "artifacts"
    assert (arts / "ort_qdq.all.onnx").read_bytes() == (arts / "ort_qdq.layout.onnx").read_bytes()
    assert opt["all"].numerics.worst_sqnr_db == opt["layout"].numerics.worst_sqnr_db
    assert all(o.drift_steps in (None, 0.0) for o in opt["all"].numerics.outputs)
    # A level that changed the graph was run, not reused.
    assert opt["extended"].same_graph_as is None


def test_identical_graphs_reuse_the_latency_measurement(compared):
    report, _ = compared("conv_relu", latency={"runs": 3, "warmup": 2}, latency_levels=["extended", "layout", "all"])
    opt = report.artifacts["ort_qdq"].optimized
    assert opt["all"].same_graph_as == "layout"
    assert opt["all"].latency.median_ms == opt["layout"].latency.median_ms
    assert opt["all"].latency.timed_with == "layout"
    # A level that ran was timed after its warm-up runs.
    assert opt["extended"].latency.runs >= 3 and opt["extended"].latency.median_ms > 0
    assert opt["extended"].latency.warmup >= 2 and opt["basic"].latency is None  # basic: not in latency_levels
