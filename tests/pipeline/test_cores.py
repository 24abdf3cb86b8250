"""The machine's cores ledger (issue 47): a lone job gets every core, concurrent jobs share them, a job
widens again when its neighbour ends, and a dead job holds no core."""

from __future__ import annotations

import subprocess
import sys

import pytest

from service.pipeline.cores import CoreShare, job_in_ledger, ledger_entries
from service.pipeline.environment import usable_cores

CORES = usable_cores()
needs_two = pytest.mark.skipif(CORES < 2, reason="sharing needs a machine with two usable cores")


def test_a_lone_job_gets_every_usable_core(tmp_path):
    with job_in_ledger(tmp_path, "a") as share:
        assert share.now() == CORES
        assert "no other job running" in share.why()
    assert ledger_entries(tmp_path) == []  # the entry goes with the job


@needs_two
def test_two_jobs_share_the_cores_and_the_first_widens_when_the_second_ends(tmp_path):
    with job_in_ledger(tmp_path, "a") as a:
        assert a.now() == CORES
        with job_in_ledger(tmp_path, "b") as b:
            # the remainder of an odd count goes to the job that joined first
            assert (a.now(), b.now()) == (CORES - CORES // 2, CORES // 2)
            assert f"shared by the 2 jobs" in b.why()
        assert a.now() == CORES
        used, low, high = a.cores_used()
        assert (low, high) == (CORES - CORES // 2, CORES) and "as other jobs started and ended" in a.why()


def test_the_bound_caps_the_share_and_says_so(tmp_path):
    with job_in_ledger(tmp_path, "a", cap=1, cap_source="QUANTCOMPARE_JOB_CORES") as share:
        assert share.now() == 1
        if CORES > 1:
            assert "capped by QUANTCOMPARE_JOB_CORES=1" in share.why()


@needs_two
def test_a_job_whose_process_died_holds_no_core(tmp_path):
    """A worker killed under its job leaves its entry behind: a dead process's entry is stale."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f"{1:020d}.dead").write_text(f"{int(dead.stdout)} 1\n")
    with job_in_ledger(tmp_path, "a") as share:
        assert share.now() == CORES
    assert not (tmp_path / f"{1:020d}.dead").exists()


@needs_two
def test_a_live_process_of_another_job_counts(tmp_path):
    """The ledger is per machine: an entry written by another worker process (here a live child) is a job."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        from service.pipeline.cores import _process_start

        (tmp_path / f"{1:020d}.other").write_text(f"{other.pid} {_process_start(other.pid)}\n")
        with job_in_ledger(tmp_path, "a") as share:
            assert share.now() == CORES // 2
    finally:
        other.kill()
        other.wait()


def test_an_unwritable_ledger_leaves_the_job_on_its_bound(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with job_in_ledger(blocker / "ledger", "a", cap=1, cap_source="--cores") as share:
        assert share.now() == 1


def test_a_fixed_share_is_what_it_says():
    assert CoreShare.fixed(2, "the test").now() == 2


def _comparison(ledger, workdir):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions(calibration_samples=2, eval_samples=4, levels=["disable_all", "all"],
                                latency={"enabled": False}, advice={"enabled": False}, layers={"enabled": False},
                                artifacts=["ort_qdq"])
    return run_comparison(ComparisonRequest(example="conv_relu", options=options, cores_ledger=ledger), workdir)


@needs_two
def test_a_job_reports_the_cores_it_got_alone_and_beside_another(tmp_path):
    """Through the spine: alone in the ledger the job's accuracy ran on every usable core; beside another
    running job (a live process's entry) on its share; the figures are the same either way."""
    from service.pipeline.cores import _process_start

    alone = _comparison(tmp_path / "ledger", tmp_path / "alone")
    assert alone.job_cores.cores == CORES and "no other job running" in alone.job_cores.source
    assert f"on {CORES} core(s)" in alone.job_cores.how
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (tmp_path / "ledger" / f"{1:020d}.other").write_text(f"{other.pid} {_process_start(other.pid)}\n")
        shared = _comparison(tmp_path / "ledger", tmp_path / "shared")
    finally:
        other.kill()
        other.wait()
    assert shared.job_cores.cores == CORES // 2 and "shared by the 2 jobs" in shared.job_cores.source
    figures = lambda r: {(a, lv): ol.numerics.model_dump() for a, art in r.artifacts.items()  # noqa: E731
                         for lv, ol in art.optimized.items() if ol.numerics is not None}
    assert figures(alone) and figures(alone) == figures(shared)
