"""Where the time goes (issue 51): one run under ORT's profiler, outside the timed runs. Oracle: ORT's
own trace (enable_profiling), on tiny graphs built in code and quantized by ORT."""

from __future__ import annotations

import numpy as np
import pytest

from service.pipeline.quantize.ort_quant import quantized_by_ort
from service.pipeline.runtime.profile import PROFILE_WARMUP, profile_of, where_it_loses
from service.schemas.options import ComparisonOptions, resolved_ort_settings
from tests import models

FEED = {"x": np.random.default_rng(1).standard_normal((1, 32, 48, 48)).astype(np.float32)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A chain of four 3x3 convs (32 channels, 48x48: kernels dominate a run), in fp32 and in ORT's
    QOperator format with int8 and with uint8 activations."""
    tmp = tmp_path_factory.mktemp("profile")
    fp32 = models.save("conv_chain", tmp / "fp32.onnx", layers=4, channels=32, size=48, kernel=3, pads=1, scale=0.2)
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 32, 48, 48)).astype(np.float32)} for i in range(4)]
    out = {"fp32": fp32}
    for act in ("int8", "uint8"):
        settings = {**resolved_ort_settings(ComparisonOptions()), "activation_type": act}
        out[act] = tmp / f"qop_{act}.onnx"
        quantized_by_ort(fp32, out[act], feeds, ["x"], quant_format="qoperator", settings=settings)
    return out


@pytest.mark.parametrize("which", ["fp32", "int8", "uint8"])
def test_by_op_type_adds_up_to_the_runs_total(files, which):
    """Within 10% where kernels dominate the run. On a shared machine a thread preempted between two nodes
    adds time to the run that no node holds (load only ever adds it): the best of three profiles is read."""
    p = min((profile_of(files[which], "all", FEED, threads=1, median_ms=None) for _ in range(3)),
            key=lambda p: abs(sum(p.by_op_type.values()) - p.total_ms) / p.total_ms)
    assert p.total_ms > 0 and abs(sum(p.by_op_type.values()) - p.total_ms) <= 0.10 * p.total_ms
    assert p.unattributed_ms == pytest.approx(p.total_ms - p.kernels_ms, abs=1e-3)
    assert abs(sum(p.by_class.values()) - sum(p.by_op_type.values())) < 1e-3
    assert p.top_nodes[0].ms == max(n.ms for n in p.top_nodes)


def test_the_kernel_named_is_the_one_orts_trace_shows(files):
    """int8 activations in a QOperator file: ORT runs QLinearConv on int8 x int8 (MLAS's s8s8 path);
    uint8 activations, the one condition changed: u8s8."""
    s8 = profile_of(files["int8"], "all", FEED, threads=1, median_ms=None)
    u8 = profile_of(files["uint8"], "all", FEED, threads=1, median_ms=None)
    assert s8.kernels["QLinearConv"] == {"s8s8": 4} and u8.kernels["QLinearConv"] == {"u8s8": 4}
    assert {n.kernel for n in s8.top_nodes if n.op_type == "QLinearConv"} == {"s8s8"}
    said = where_it_loses("ort_qoperator", "all", s8, 3.0, 1.0)
    assert said.startswith("ort_qoperator at all: ") and "in 4 QLinearConv on s8s8 kernels" in said
    assert where_it_loses("ort_qoperator", "all", s8, 1.0, 3.0) is None  # not slower than fp32: nothing to say


def test_the_profiled_run_is_never_a_timed_run(compared):
    """The levels stage times a graph, then profiles it on a session of its own: ORT's trace holds the
    profiler's own warm-up and run, none of the timed runs (a profiled timed session would show them all)."""
    report, _ = compared("conv_relu", latency={"enabled": True, "runs": 7, "min_runs": 7}, advice={"enabled": False},
                         layers={"enabled": False})
    for art in report.artifacts.values():
        ol = art.optimized["all"]
        assert ol.latency.runs == 7 and ol.profile is not None
        assert ol.profile.runs_in_profile == ol.profile.warmup + 1 and ol.profile.warmup >= PROFILE_WARMUP
        assert ol.profile.overhead is not None and ol.profile.profiled_run_ms > 0
        assert ol.profile.how.startswith("ORT's profiler")
    assert report.artifacts["fp32"].optimized["all"].profile.where_it_loses is None


def test_the_page_draws_one_bar_per_artifact_and_the_cli_prints_the_top_five_nodes(compared):
    from service.render.profile_view import profile_bars_svg, profile_lines
    from service.render.text import summary_table

    report, _ = compared("conv_relu", latency={"enabled": True, "runs": 7, "min_runs": 7}, advice={"enabled": False},
                         layers={"enabled": False})
    svg = profile_bars_svg(report.model_dump(mode="json"))
    assert svg.count('font-size="12">') == len(report.artifacts)  # one labelled bar per artifact
    text = summary_table(report)
    assert "where the time goes at all" in text and "\n".join(profile_lines(report)) in text
    # one line per quantized artifact: where it loses (its first node), then the other four as op type and share
    top = report.artifacts["ort_qdq"].optimized["all"].profile.top_nodes[:5]
    line = next(x for x in text.splitlines() if x.startswith("  ort_qdq") and " ms: " in x)
    assert all(f"{n.op_type}" in line for n in top[1:4]) and f"{top[1].share:.0%}" in line
