"""The benchmark cannot read "met" after a failure: each target's check needs its work to have happened."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GOOD_HEALTHZ = {"model": "m", "requests": 500, "p50_ms": 1.0, "p99_ms": 5.0, "max_ms": 20.0, "jobs_finished": 2,
                "jobs_submitted": 2, "jobs_succeeded": 2, "job_outcomes": ["succeeded"] * 2, "healthz_answers": {"200": 500}}


@pytest.mark.parametrize("change", [
    {}, {"jobs_succeeded": 1, "job_outcomes": ["succeeded", "failed"]}, {"jobs_succeeded": 0, "jobs_finished": 0},
    {"healthz_answers": {"200": 490, "ConnectError": 10}}, {"healthz_answers": {"503 {}": 500}},
    {"requests": 0, "p99_ms": None, "healthz_answers": {}}, {"p99_ms": 51.0},
    {"healthz_answers": None},  # a run from before the answers were recorded
], ids=["all good", "a job failed", "no job finished", "probes refused", "probes not ok", "no probe", "slow",
        "answers not recorded"])
def test_healthz_target_needs_both_jobs_and_every_probe(bench, change):
    h = {**GOOD_HEALTHZ, **change}
    assert bench.healthz_met(h) is (change == {})
    line = bench.tables([], {"healthz": h})
    assert ("(target <= 50: met)" in line) is (change == {})


@pytest.mark.parametrize("status, growth, met", [(202, 0.7, True), (200, 1.0, True), (413, 0.1, False),
                                                  (500, 0.1, False), (422, 0.1, False), (202, 60.0, False)])
def test_upload_target_needs_the_upload_accepted(bench, status, growth, met):
    u = {"model_mb": 200.0, "status": status, "upload_s": 1.0, "rss_before_mb": 100, "rss_peak_mb": 100 + growth,
         "rss_after_mb": 100, "growth_mb": growth}
    assert bench.upload_met(u) is met


def test_a_service_ratio_says_how_much_work_it_skipped(bench):
    report = {"artifacts": {"fp32": {"optimized": {"basic": {"same_graph_as": None}, "layout": {"same_graph_as": "extended"}}},
                            "ort_qdq": {"optimized": {"all": {"same_graph_as": "layout"}}}}}
    assert bench.levels_reused(report) == 2


def test_record_writes_tables_and_raw_json_under_var_not_into_bench(bench, tmp_path, monkeypatch):
    import argparse
    import json

    assert bench.OUT.relative_to(ROOT).parts[0] == "var"  # raw output stays out of git (var/ is ignored)
    monkeypatch.setattr(bench, "OUT", tmp_path / "run")
    monkeypatch.setattr(bench, "BENCH", tmp_path / "bench-must-not-be-written")
    row = {"model": "resnet18", "runs": 1, "by_hand_s": 10.0, "cli_s": 9.0, "service_s": 6.0, "repeat_ms": 5.0,
           "repeat_cached": True, "cli_ratio": 0.9, "service_ratio": 0.6, "rss_by_hand_mb": 1, "rss_cli_mb": 1,
           "rss_worker_mb": 1, "by_hand_steps": {}, "cli_timings": {}, "service_timings": {}, "sqnr_all": {},
           "target_ratio": 0.8, "service_met": True, "same_work": True, "repeat_met": True, "levels_reused": 3}
    extras = {"healthz": {**GOOD_HEALTHZ, "jobs_succeeded": 1}, "upload": {"model_mb": 200.0, "status": 500, "upload_s": 1.0,
              "rss_before_mb": 100, "rss_peak_mb": 100, "rss_after_mb": 100, "growth_mb": 0.0}}
    mach = {"cpu": "x", "arch": "x86_64", "logical_cores": 2, "physical_cores": 2, "memory_gib": 1,
            "load_avg_at_start": [0, 0, 0], "isa_flags": [], "python": "3.11", "versions": {}}
    bench.record([row], extras, mach, argparse.Namespace(runs=1), "2026-01-01T00:00:00+00:00")
    assert not (tmp_path / "bench-must-not-be-written").exists()
    text = (tmp_path / "run" / "RESULTS.md").read_text()
    assert "/healthz p99 <= 50 ms with two comparisons running (both succeed, every probe 200): **not met**" in text
    assert "(upload accepted): **not met**" in text
    assert "not equal work: the service reused 3 level graph(s)" in text
    assert json.loads((tmp_path / "run" / "RESULTS.json").read_text())["rows"][0]["levels_reused"] == 3
