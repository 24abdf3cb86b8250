"""The page's first section from a report's JSON alone (render/page.py): six artifacts (issue 50's quantizers), a
failed path, a running job's report and a report without levels all render, with the cards first."""

from __future__ import annotations

import re
import shutil
from types import SimpleNamespace

import pytest

from service.render.page import render_job_page
from tests.render.test_graph_view import chain_level

REC = SimpleNamespace(id="job1", created_at=0, stage=None, total=None, done=None)


def level(sqnr, ms):
    lv = chain_level(3)
    lv.update(numerics={"worst_sqnr_db": sqnr, "elementwise_outputs": 1, "accuracy": "measured", "outputs": []},
              latency={"median_ms": ms}, int8_coverage=0.5)
    return {"all": lv}


def report(**extra):
    arts = {"fp32": {"status": "ok", "optimized": level(None, 1.0)}}
    for i, name in enumerate(("pt2e_qdq", "ort_qdq", "ort_qoperator", "nncf_qdq", "modelopt_qdq", "quark_qdq")):
        arts[name] = {"status": "ok", "optimized": level(25.0 + i, 0.6 + 0.05 * i)}
    arts["user_file"] = {"status": "failed", "error": {"stage": "inspect", "message": "not an int8 file"}}
    return {"artifacts": arts, **extra}


def test_six_artifacts_and_a_failed_one_each_get_a_card_the_answer_first():
    page = render_job_page(REC, report(), [("ort_qdq.all.onnx", 10)])
    assert len(re.findall(r'class="card( chosen)?"', page)) == 7
    assert page.index('class="answer"') < page.index('class="card') < page.index('id="graphs"') < page.index('id="glance"')
    assert "Ship ort_qdq" in page  # 0.65x is within 10% of pt2e_qdq's 0.60x and 1 dB more accurate
    assert "<details><summary>top blocker and its fix</summary>" in page  # more than three cards: detail folds
    assert "inspect: not an int8 file" in page
    assert "/artifacts/ort_qdq.all.node_data.json" in page  # next to the level graph download
    if shutil.which("dot"):
        assert page.count('<svg class="graph"') == 6


def test_a_running_job_names_no_file_and_an_old_report_still_renders():
    running = render_job_page(REC, report(partial=True, sections_done=["files", "level_graphs"]), [])
    assert "Running: which file to ship comes with the finished report" in running and "ship this" not in running
    old = render_job_page(REC, {"artifacts": {"fp32": {"status": "ok"}, "ort_qdq": {"status": "ok"}}}, [])
    assert "No file qualifies" in old and "no level graph to draw" in old


@pytest.mark.parametrize("asked, drawn", [("basic", "all"), (None, "all")])
def test_graph_level_falls_back_to_the_deployed_level(asked, drawn):
    page = render_job_page(REC, report(), [], graph_level=asked)
    assert f"The graph ORT runs at {drawn}" in page
