"""The report as it comes, through a real server (issue 39): a running job's GET carries the sections
finished so far, the page renders them and reloads, the client's wait() returns at a named section, and
nothing the partial report says changes in the finished one."""

from __future__ import annotations


import httpx
import pytest
from live_server import LiveServer

import quantcompare_client as qc
from service.pipeline.environment import usable_cores
from tests.partial_reports import assert_nothing_changes_later

OPTIONS = {"calibration_samples": 2, "eval_samples": 2, "levels": ["disable_all", "all"],
           "latency": {"runs": 3, "min_runs": 3}, "advice": {"enabled": False}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("partial")
    s = LiveServer(root / "var", workers=1, job_cores=2, cores_ledger=root / "ledger",
                   job_function="section_jobs:run", job_timeout_s=600).start()
    yield s
    s.stop()


def test_a_partial_report_is_served_while_the_job_runs_and_the_final_one_agrees(server):
    with qc.Client(server.base_url, timeout=60) as client:
        job = client.submit("conv_relu", options=OPTIONS)
        # the client's wait() returns at the named section, while the job still runs (it holds there)
        partial = client.wait(job, until="level_graphs", max_wait=300, progress=False)
        assert partial.partial and partial.sections_done == ["files", "level_graphs"]
        raw = httpx.get(f"{server.base_url}/v1/comparisons/{job.id}", timeout=30).json()
        assert raw["status"] == "running" and raw["report"]["partial"] is True
        assert raw["report"]["sections_done"] == ["files", "level_graphs"]
        assert raw["report"]["verdict"] is None and raw["report"]["artifacts"]["ort_qdq"]["optimized"]["all"]["op_histogram"]
        # the cores follow the load as the job goes: they come with the finished report
        assert raw["report"]["job_cores"] is None
        page = httpx.get(f"{server.base_url}/v1/comparisons/{job.id}/report.html", timeout=30).text
        assert 'http-equiv="refresh"' in page and "sections finished so far" in page and "level_graphs" in page
        (server.data_dir / "jobs" / job.id / "go").touch()
        final = client.wait(job, max_wait=600, progress=False)
    assert not final.partial and final.sections_done[-1] == "decide"
    # alone in its own ledger, bounded by QUANTCOMPARE_JOB_CORES=2: every usable core up to 2
    cores = final.raw["job_cores"]
    assert cores["cores"] == min(2, usable_cores()) and "no other job running" in cores["source"]
    assert_nothing_changes_later(raw["report"], final.raw, "level_graphs")
    # the partial file is gone once the report is written: a finished job serves its report only
    assert not (server.data_dir / "jobs" / job.id / "report.partial.json.gz").exists()
