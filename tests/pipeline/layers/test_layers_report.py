"""The ``layers`` section as the report, the page and the client carry it (op_zoo_net, defaults)."""

from __future__ import annotations

import re
import time

import pytest


@pytest.fixture(scope="module")
def zoo_report(compared):
    report, _ = compared("op_zoo_net")
    return report


def test_the_report_carries_a_layers_table_by_default(zoo_report):
    layers = zoo_report.layers
    assert layers is not None and layers.rows and layers.level == "disable_all"
    # The sample count adapts to the intervals: at least the evaluation samples, and why it stopped
    assert zoo_report.options.eval_samples <= layers.samples <= zoo_report.options.layers.max_samples
    assert layers.sampling.stopped
    assert layers.aligned_all_share >= 0.5
    assert set(layers.worst) == {a for a, art in zoo_report.artifacts.items() if a != "fp32" and art.status == "ok"}
    for a, tensor in layers.worst.items():
        finite = [r.artifacts[a].sqnr_db for r in layers.rows if a in r.artifacts and r.artifacts[a].sqnr_db is not None]
        assert next(r for r in layers.rows if r.tensor == tensor).artifacts[a].sqnr_db == min(finite)
    assert "layers" in zoo_report.timings


def test_the_page_draws_sqnr_by_depth_and_the_worst_tensors(zoo_report):
    from service.render.page import render_job_page
    from service.jobs.spec import JobSpec
    from service.jobs.store import JobRecord

    rec = JobRecord(id="b" * 32, status="succeeded", spec=JobSpec(id="b" * 32, model_name="zoo"), cache_key=None,
                    created_at=time.time(), started_at=None, finished_at=None, stage=None, done=0, total=0,
                    error=None, attempts=1)
    html = render_job_page(rec, zoo_report, [])
    section = html[html.index('id="layers"'):html.index('id="levels"')]
    assert "<script" not in section
    assert len(re.findall(r"<polyline ", section)) == len(zoo_report.layers.worst)  # one line per artifact
    worst = sorted(zoo_report.layers.rows, key=lambda r: min(
        [c.sqnr_db for c in r.artifacts.values() if c.sqnr_db is not None] or [1e9]))[0]
    assert f'<td class="mono">{worst.tensor}</td>' in section


def test_the_client_exposes_report_layers(zoo_report):
    import json

    from quantcompare_client import Report

    client_report = Report(json.loads(zoo_report.model_dump_json()))
    layers = client_report.layers
    assert layers is not None and len(layers.rows) == len(zoo_report.layers.rows)
    assert layers.worst == zoo_report.layers.worst
    row = layers.row(zoo_report.layers.rows[1].tensor)
    assert set(row.artifacts) == set(zoo_report.layers.rows[1].artifacts)
    assert layers.to_rows() and "<table>" in layers._repr_html_()
    cell = zoo_report.layers.rows[1].artifacts["ort_qdq"]
    assert row.artifacts["ort_qdq"].sqnr_db_ci == tuple(cell.sqnr_db_ci)  # its interval (issue 40)


def test_layers_off_leaves_the_section_out(compared):
    report, _ = compared("conv_relu", layers={"enabled": False})
    assert report.layers is None and "layers" not in report.timings


def test_the_cli_summary_names_the_worst_tensor_per_artifact(zoo_report):
    from service.render.text import summary_table

    text = summary_table(zoo_report)
    for art, tensor in zoo_report.layers.worst.items():
        assert re.search(rf"^  {art}\s+worst {re.escape(tensor)} ", text, re.M), art


@pytest.mark.heavy
def test_retry_through_the_spine_feeds_advice_items(compared):
    from service.pipeline.layers.layers_retry import advice_from_retry

    # Two samples, the table's count before its intervals: their chance drops give op_zoo_net compute-op
    # origins to exclude. With the adaptive count (~550 samples) no drop at a compute op reaches 3 dB, so
    # there is nothing to retry: this test is about the plumbing.
    report, _ = compared("op_zoo_net", layers={"retry_k": 1, "min_samples": 2, "max_samples": 2},
                         latency={"enabled": True, "runs": 3})
    retry = report.layers.retry
    assert retry is not None and retry.k == 1
    done = [r for r in retry.artifacts if not r.error]
    assert {r.artifact for r in done} >= {"ort_qdq", "ort_qoperator"}
    for r in done:
        assert len(r.excluded_nodes) == 1 and r.latency_ms_before and r.latency_ms_after
    items = advice_from_retry(retry)
    assert {i["artifact"] for i in items} == {r.artifact for r in done}
    from service.render.text import summary_table

    text = summary_table(report)  # the CLI said nothing of the retry: report.json only
    assert "exclude and retry (the 1 worst origin node(s) left in float" in text
    for r in done:
        assert f"{r.excluded_nodes[0]}: " in text


def test_the_explanation_blames_the_op_when_both_files_feed_it_alike():
    """refinenet's ASPP Conv under the shared-bias QOperator defect: the same step in both files and
    inputs at 34.1 dB in both, yet 24 dB apart after the op. The explanation said the difference came
    from the inputs; it now says this op loses it. Inputs apart (the control): the inputs, as before."""
    from service.pipeline.layers.layers import _explanation
    from service.schemas.layers import LayerCell

    def cell(own, inputs):
        return LayerCell(sqnr_db=own, cosine=0.9, max_abs_error=0.1, scale=0.01, zero_point=0, file_tensor="t",
                         alignment="by name", drop_db=inputs - own)

    alike = _explanation({"pt2e_qdq": cell(32.0, 34.1), "ort_qoperator": cell(8.0, 34.1)}, {})
    assert "same step and inputs alike (34.1 dB vs 34.1 dB): ort_qoperator loses it in this op" in alike
    apart = _explanation({"pt2e_qdq": cell(32.0, 34.1), "ort_qoperator": cell(8.0, 9.0)}, {})
    assert "the difference comes from the inputs this op reads" in apart
