"""Job retention (``retention_hours``): finished jobs past it are deleted, index row and folder;
running, queued and recent jobs stay; 0 keeps everything. docs/settings.md promises it; this runs it."""

from __future__ import annotations

import time

import pytest

from service.jobs import pool as pool_module
from service.jobs.executor import LocalExecutor
from service.jobs.pool import prepare_data_dir, sweep_expired
from service.jobs.spec import JobSpec
from service.jobs.store import JobStore
from service.jobs.submission import new_job_id
from test_pool import make_settings, submit, wait_finished, wait_workers


def _job(store: JobStore, settings, *, finish: str | None, run: bool = True) -> str:
    spec = JobSpec(id=new_job_id(), model_file="input/model.onnx")
    assert store.create(spec, cache_key=None)
    (settings.jobs_dir / spec.id).mkdir(parents=True)
    (settings.jobs_dir / spec.id / "report.json").write_text("{}")
    if run:
        assert store.claim_next().id == spec.id
    if finish:
        assert store.finish(spec.id, finish)
    return spec.id


def test_sweep_deletes_only_finished_jobs_older_than_the_retention(tmp_path):
    settings = make_settings(tmp_path, retention_hours=1.0 / 3600)  # one second
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = JobStore(settings.db_path)
    prepare_data_dir(settings, store)
    old_ok, old_failed = _job(store, settings, finish="succeeded"), _job(store, settings, finish="failed")
    time.sleep(1.3)
    running = _job(store, settings, finish=None)
    fresh = _job(store, settings, finish="succeeded")
    queued = _job(store, settings, finish=None, run=False)
    assert sorted(sweep_expired(settings, store)) == sorted([old_ok, old_failed])
    assert store.get(old_ok) is None and store.get(old_failed) is None
    assert not (settings.jobs_dir / old_ok).exists() and not (settings.jobs_dir / old_failed).exists()
    for kept in (running, fresh, queued):
        assert store.get(kept) is not None and (settings.jobs_dir / kept / "report.json").is_file()
    time.sleep(1.3)
    keep_all = make_settings(tmp_path, retention_hours=0)
    assert sweep_expired(keep_all, store) == [] and store.get(fresh) is not None  # 0 = keep forever
    assert sweep_expired(settings, store) == [fresh]


def test_the_running_service_sweeps_expired_jobs(tmp_path, monkeypatch):
    monkeypatch.setattr(pool_module, "HOUSEKEEPING_EVERY_S", 0.2)  # the pool's own loop, just sooner
    ex = LocalExecutor(make_settings(tmp_path, workers=1, retention_hours=1.0 / 3600))
    ex.start()
    try:
        wait_workers(ex, 1)
        job_id = submit(ex, "ok")
        rec = wait_finished(ex, job_id)
        assert rec.status == "succeeded", rec.error
        folder = ex.job_dir(job_id)
        assert folder.is_dir()
        deadline = time.monotonic() + 20
        while ex.get(job_id) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ex.get(job_id) is None, "the finished job outlived its retention"
        assert not folder.exists()
    finally:
        ex.stop()


def test_a_job_pinned_by_a_download_outlives_its_retention_until_unpinned(tmp_path):
    from service.jobs.storage.disk import pin, unpin

    settings = make_settings(tmp_path, retention_hours=1.0 / 3600)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = JobStore(settings.db_path)
    prepare_data_dir(settings, store)
    job = _job(store, settings, finish="succeeded")
    time.sleep(1.3)
    marker = pin(settings.data_dir, job)
    assert sweep_expired(settings, store) == [] and (settings.jobs_dir / job / "report.json").is_file()
    unpin(marker)
    assert sweep_expired(settings, store) == [job] and not (settings.jobs_dir / job).exists()
