"""The worker pool under faults: crashes, hangs, memory, restarts. Jobs are tiny functions from
``fault_jobs`` (they exercise our supervisor, not the toolchain)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from service.config import Settings
from service.errors import Busy
from service.jobs.executor import LocalExecutor
from service.jobs.submission import new_job_id
from service.jobs.pool import prepare_data_dir
from service.jobs.spec import JobSpec
from service.jobs.store import JobStore

JOB_FN = "fault_jobs:run"


def make_settings(tmp: Path, **kw) -> Settings:
    base = dict(data_dir=tmp, workers=2, worker_preload="", job_function=JOB_FN, job_timeout_s=4.0,
                worker_memory_mb=1024, max_queue=50, retention_hours=0)
    base.update(kw)
    return Settings(**base)


def submit(ex: LocalExecutor, command: str) -> str:
    staged = ex.staging_dir()
    (staged / "input").mkdir()
    (staged / "input" / "model.onnx").write_text(command)
    spec = JobSpec(id=new_job_id(), model_file="input/model.onnx")
    ex.submit(spec, staged, cache_key=None)
    return spec.id


def wait_finished(ex: LocalExecutor, job_id: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = ex.get(job_id)
        if rec.finished:
            return rec
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {ex.get(job_id).status} after {timeout}s")


def wait_workers(ex: LocalExecutor, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ex.pool.worker_states().get("idle", 0) + ex.pool.worker_states().get("busy", 0) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"pool did not reach {n} workers: {ex.pool.worker_states()}")


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    executor = LocalExecutor(make_settings(tmp_path_factory.mktemp("pool")))
    executor.start()
    wait_workers(executor, 2)
    yield executor
    executor.stop()


def test_a_job_runs_in_its_own_folder_and_reports_progress(ex):
    rec = wait_finished(ex, submit(ex, "ok"))
    assert rec.status == "succeeded", rec.error
    assert (rec.stage, rec.done, rec.total) == ("optimize", 3, 3)
    job_dir = ex.job_dir(rec.id)
    assert (job_dir / "ran.txt").is_file() and (job_dir / "job.json").is_file()
    assert int((job_dir / "ran.txt").read_text()) != os.getpid()  # ran in a worker, not here


def test_a_segfault_fails_only_its_job_and_the_worker_is_replaced(ex):
    slow = submit(ex, "sleep 1.5")
    time.sleep(0.2)
    crash = submit(ex, "segv")
    rec = wait_finished(ex, crash)
    assert rec.status == "failed"
    assert rec.error["code"] == "worker_died"
    assert rec.error["detail"] == "worker died (SIGSEGV) during optimize"
    assert wait_finished(ex, slow).status == "succeeded"
    wait_workers(ex, 2)
    assert wait_finished(ex, submit(ex, "ok")).status == "succeeded"


def test_a_hung_job_is_killed_with_everything_it_started(ex):
    rec = wait_finished(ex, submit(ex, "grandchild"))
    assert rec.status == "failed"
    assert rec.error["code"] == "job_timeout"
    assert "time limit of 4 s during evaluate" in rec.error["detail"]
    child = int((ex.job_dir(rec.id) / "grandchild.pid").read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the job's own child survived the process-group kill"
        time.sleep(0.05)
    wait_workers(ex, 2)


def test_a_job_past_the_memory_limit_fails_with_the_limit_in_the_reason(ex):
    rec = wait_finished(ex, submit(ex, "alloc 2048"))
    assert rec.status == "failed"
    assert rec.error["code"] in ("worker_memory_limit", "worker_died"), rec.error
    assert "1024 MiB" in rec.error["detail"] + rec.error.get("hint", "")
    wait_workers(ex, 2)
    assert wait_finished(ex, submit(ex, "ok")).status == "succeeded"


def test_user_errors_keep_their_code_and_bugs_hide_their_details(ex):
    user = wait_finished(ex, submit(ex, "user_error"))
    assert (user.error["code"], user.error["status"], user.error["hint"]) == ("invalid_model", 422, "upload an .onnx file")
    bug = wait_finished(ex, submit(ex, "bug"))
    assert bug.error["code"] == "internal_error"
    assert "/srv/secret" not in str(bug.error) and "Traceback" not in str(bug.error)


def test_a_full_queue_refuses_with_busy(tmp_path):
    ex = LocalExecutor(make_settings(tmp_path, max_queue=1), start_pool=False)
    ex.start()
    submit(ex, "ok")
    with pytest.raises(Busy) as e:
        submit(ex, "ok")
    assert e.value.retry_after >= 1
    assert len(list((tmp_path / "jobs").iterdir())) == 1  # the refused job left no folder
    ex.stop()


def test_workers_are_recycled_after_max_jobs(tmp_path):
    ex = LocalExecutor(make_settings(tmp_path, workers=1, worker_max_jobs=2))
    ex.start()
    try:
        pids = {int((ex.job_dir(j).joinpath("ran.txt")).read_text())
                for j in [wait_finished(ex, submit(ex, "ok")).id for _ in range(4)]}
        assert len(pids) == 2
    finally:
        ex.stop()


def test_a_worker_in_which_a_path_was_stopped_at_its_time_limit_retires(tmp_path):
    """A toolchain stopped mid-way may keep half-made state (time_limit.py): the next job gets a fresh
    worker, while a job with no stopped path leaves its worker serving."""
    ex = LocalExecutor(make_settings(tmp_path, workers=1))
    ex.start()
    try:
        jobs = [wait_finished(ex, submit(ex, command)) for command in ("ok", "ok", "stopped_path", "ok")]
        assert all(rec.status == "succeeded" for rec in jobs), [rec.error for rec in jobs]
        pids = [int(ex.job_dir(rec.id).joinpath("ran.txt").read_text()) for rec in jobs]
        assert pids[0] == pids[1] == pids[2] != pids[3]
    finally:
        ex.stop()


def test_restart_requeues_running_jobs_fails_twice_interrupted_and_sweeps_stale_folders(tmp_path):
    settings = make_settings(tmp_path)
    ex = LocalExecutor(settings, start_pool=False)
    ex.start()
    once, twice, queued = submit(ex, "ok"), submit(ex, "ok"), submit(ex, "ok")
    ex.store.claim_next(), ex.store.claim_next()  # both "running" when the service dies
    ex.store.db.write("UPDATE jobs SET attempts=2 WHERE id=?", (twice,))
    ex.store.close()
    (settings.jobs_dir / "deadbeef").mkdir()  # a folder no job owns
    (settings.tmp_dir / "half-upload").mkdir(parents=True)

    store = JobStore(settings.db_path)
    recovered = prepare_data_dir(settings, store)
    assert recovered["requeued"] == [once] and recovered["failed"] == [twice]
    assert recovered["swept"] == ["deadbeef"] and not any(settings.tmp_dir.iterdir())
    err = store.get(twice).error
    assert err["code"] == "interrupted" and "service stopped while this job was running" in err["detail"]
    store.close()

    ex2 = LocalExecutor(settings)
    ex2.start()
    try:
        assert wait_finished(ex2, once).status == "succeeded"
        assert wait_finished(ex2, queued).status == "succeeded"
    finally:
        ex2.stop()


def test_stopping_the_service_puts_running_jobs_back_in_the_queue(tmp_path):
    ex = LocalExecutor(make_settings(tmp_path, workers=1))
    ex.start()
    job = submit(ex, "sleep 30")
    deadline = time.monotonic() + 20
    while ex.get(job).status != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    ex.pool.stop()
    rec = ex.store.get(job)
    assert rec.status == "queued" and rec.attempts == 0
    ex.store.close()
