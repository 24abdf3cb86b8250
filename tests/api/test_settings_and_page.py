"""Settings from the environment, and the page renderer on reports with sections missing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from service.render.page import render_job_page
from service.render.svg import bar_chart, parse_rewrite, rewrite_drawing
from service.config import Settings
from service.jobs.spec import JobSpec
from service.jobs.store import JobRecord

SETTINGS_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()


def test_every_setting_is_documented_in_the_settings_page():
    for name in Settings.model_fields:
        assert f"`QUANTCOMPARE_{name.upper()}`" in SETTINGS_PAGE, name


def test_settings_come_from_quantcompare_variables():
    s = Settings.from_env({"QUANTCOMPARE_WORKERS": "3", "QUANTCOMPARE_DATA_DIR": "/x", "QUANTCOMPARE_ALLOW_PT2": "false",
                           "QUANTCOMPARE_API_TOKEN": "", "OTHER": "1"})
    assert (s.workers, s.data_dir, s.allow_pt2, s.api_token) == (3, Path("/x"), False, None)
    assert s.db_path == Path("/x/quantcompare.sqlite3")
    with pytest.raises(ValueError, match="QUANTCOMPARE_WORKERS"):
        Settings.from_env({"QUANTCOMPARE_WORKERS": "0"})


def _rec(status="succeeded", **kw) -> JobRecord:
    base = dict(id="a" * 32, status=status, spec=JobSpec(id="a" * 32, model_name="<script>x</script>"), cache_key=None,
                created_at=time.time(), started_at=None, finished_at=None, stage=None, done=0, total=0,
                error=None, attempts=1)
    base.update(kw)
    return JobRecord(**base)


def test_a_report_with_missing_sections_renders_them_as_not_available():
    report = {"model": {"name": "<b>m</b>"}, "artifacts": {
        "ort_qdq": {"name": "ort_qdq", "status": "failed", "error": {"stage": "quantize", "type": "X", "message": "boom"}},
        "pt2e_qdq": {"name": "pt2e_qdq", "status": "ok", "optimized": {"all": {"level": "all"}}},
    }}
    html = render_job_page(_rec(), report, [])
    assert "not available" in html and "quantize: boom" in html
    assert "<b>m</b>" not in html and "&lt;b&gt;m&lt;/b&gt;" in html  # escaped


def test_pages_for_running_and_failed_jobs():
    running = render_job_page(_rec("running", stage="optimize", done=2, total=5), None, [])
    assert "optimize" in running and 'http-equiv="refresh"' in running and "<script>" not in running
    failed = render_job_page(_rec("failed", error={"code": "worker_died", "title": "t", "detail": "worker died (SIGSEGV) during optimize",
                                                   "hint": "h", "status": 500, "type": "x"}), None, [])
    assert "worker died (SIGSEGV) during optimize" in failed


@pytest.mark.parametrize("summary, before, after", [
    ("DequantizeLinear x3 + Conv + Relu + QuantizeLinear -> QLinearConv",
     [("DequantizeLinear", 3), ("Conv", 1), ("Relu", 1), ("QuantizeLinear", 1)], [("QLinearConv", 1)]),
    ("activations int8 -> uint8 (QuantizeLinear + DequantizeLinear rewritten)",
     [("activations int8", 1)], [("uint8 (QuantizeLinear + DequantizeLinear rewritten)", 1)]),
])
def test_rewrite_summaries_parse_into_before_and_after(summary, before, after):
    assert parse_rewrite(summary) == (before, after)
    assert rewrite_drawing(summary).startswith("<svg")


def test_charts_show_missing_values_and_escape_labels():
    svg = bar_chart(["basic", "all"], {"<a>": [1.0, None]}, title="t", unit="dB")
    assert svg.startswith("<svg") and "&lt;a&gt;" in svg and "–" in svg
    assert "not available" in bar_chart(["all"], {"x": [None]}, title="t", unit="ms")
