"""Pay for what is asked (issue 39): depth, latency_levels, and the report as it comes.

Two real comparisons of conv_relu (torchao, onnxruntime), one at depth "structure" and one at the
default depth, with ORT's ``InferenceSession.run`` counted per model file (a hook around the real
method: every run still runs) and every partial report the spine publishes kept.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions, timed_levels
from tests.partial_reports import assert_nothing_changes_later

QUANTIZED = ("pt2e_qdq.onnx", "ort_qdq.onnx", "ort_qoperator.onnx")
SMALL = {"calibration_samples": 2, "eval_samples": 3, "levels": ["disable_all", "extended", "all"],
         "latency": {"runs": 3, "min_runs": 3}}


def _compare(tmp_path_factory, **options):
    import onnxruntime as ort

    runs: Counter = Counter()
    real = ort.InferenceSession.run
    lock = threading.Lock()

    def counted(self, *a, **kw):
        with lock:
            runs[Path(getattr(self, "_model_path", None) or "<bytes>").name] += 1
        return real(self, *a, **kw)

    sections: list[tuple[str, dict]] = []
    workdir = tmp_path_factory.mktemp("depth")
    request = ComparisonRequest(example="conv_relu", options=ComparisonOptions.model_validate({**SMALL, **options}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ort.InferenceSession, "run", counted)
        report = run_comparison(request, workdir, report_id="0" * 32,
                                on_section=lambda name, r: sections.append((name, r.model_dump(mode="json"))))
    return report, runs, sections


@pytest.fixture(scope="module")
def structure(tmp_path_factory):
    return _compare(tmp_path_factory, depth="structure")


@pytest.fixture(scope="module")
def standard(tmp_path_factory):
    return _compare(tmp_path_factory)


def test_structure_runs_no_evaluation_session(structure, standard):
    report, runs, _ = structure
    # No session of a quantized file ran a sample; fp32's file ran once: the fp32 stage's check that the
    # reference runs at the job's shapes (on the first calibration sample), before any path.
    assert all(runs[f] == 0 for f in QUANTIZED), runs
    assert runs["fp32.onnx"] <= 1, runs
    # ... while every level graph was made, summarized and diffed: the structure is all there.
    for name in ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator"):
        for level in SMALL["levels"]:
            ol = report.artifacts[name].optimized[level]
            assert ol.error is None and ol.op_histogram and ol.graph_sha256
            assert ol.numerics is None and ol.latency is None
            assert "depth 'structure'" in ol.not_measured["numerics"]
    assert report.artifacts["ort_qdq"].optimized["all"].int8_coverage == 1.0
    assert report.decisions and report.layers is None and not report.advice and not report.agreement
    assert [n.option for n in report.not_measured] == ["depth: 'standard' (or 'full')"]
    assert report.sections_done == ["files", "level_graphs", "decide"] and not report.partial
    # The hook sees what the default depth runs: the same count is not zero by accident.
    _, std_runs, _ = standard
    assert all(std_runs[f] >= SMALL["eval_samples"] for f in QUANTIZED), std_runs


def test_standard_times_latency_levels_only_and_measures_accuracy_everywhere(standard):
    report, _, _ = standard
    assert report.options.latency_levels == ["all"] and report.options.depth == "standard"
    for name, art in report.artifacts.items():
        for level, ol in art.optimized.items():
            assert ol.numerics is not None, (name, level)
            if level == "all":
                assert ol.latency is not None and ol.latency.runs >= 3 and ol.latency.runs_from_eval == 0
            else:
                assert ol.latency is None
                assert "options.latency_levels" in ol.not_measured["latency"] and level in ol.not_measured["latency"]
    (latency,) = [n for n in report.not_measured if n.what.startswith("latency")]
    assert "disable_all, extended" in latency.what and "latency_levels" in latency.option
    assert report.job_cores is not None and report.job_cores.cores >= 1 and report.job_cores.source


def test_partial_reports_come_in_order_and_hold_no_figure_a_later_section_changes(standard):
    report, _, sections = standard
    names = [n for n, _ in sections]
    assert names == ["files", "level_graphs", "accuracy:fp32", "accuracy:pt2e_qdq", "accuracy:ort_qdq",
                     "accuracy:ort_qoperator", "agreement", "latency", "layers", "advice"], names
    final = json.loads(report.model_dump_json())
    assert final["partial"] is False and final["sections_done"] == names + ["decide"]
    for i, (name, partial) in enumerate(sections):
        assert partial["partial"] is True and partial["sections_done"] == names[: i + 1]
        assert partial["verdict"] is None and partial["timings"] == {} and partial["cost"] is None
        assert_nothing_changes_later(partial, final, name)
    files = sections[0][1]
    assert all(not a["optimized"] for a in files["artifacts"].values())  # the files first, no level yet
    graphs = sections[1][1]
    assert graphs["decisions"] and all(ol["numerics"] is None for a in graphs["artifacts"].values()
                                       for ol in a["optimized"].values())
    fp32_done = sections[2][1]["artifacts"]
    assert fp32_done["fp32"]["optimized"]["all"]["numerics"] is not None
    assert fp32_done["ort_qdq"]["optimized"]["all"]["numerics"] is None


@pytest.mark.parametrize("options, message", [
    ({"depth": "structure", "gates": [{"artifact": "ort_qdq", "metric": "sqnr_db", "value": 25}]}, "depth 'standard'"),
    ({"gates": [{"artifact": "ort_qdq", "level": "basic", "metric": "latency_ratio", "op": "<=", "value": 1.2}]},
     "add 'basic' to latency_levels"),
    ({"levels": ["basic"], "latency_levels": ["all"]}, "not among the levels run"),
])
def test_a_gate_on_a_figure_not_measured_is_refused_naming_the_option(options, message):
    with pytest.raises(ValidationError, match=message):
        ComparisonOptions.model_validate(options)


def test_latency_levels_follow_the_levels_when_they_leave_out_all():
    assert ComparisonOptions.model_validate({"levels": ["basic", "extended"]}).latency_levels == ["extended"]
    full = ComparisonOptions.model_validate({"depth": "full", "levels": ["basic", "all"]})
    assert timed_levels(full) == ["basic", "all"]
    assert timed_levels(ComparisonOptions(depth="structure")) == []
