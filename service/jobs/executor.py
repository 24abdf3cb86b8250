"""The job system as the API sees it: stage files, submit, look up, find a cached result.

``LocalExecutor`` runs jobs in this machine's worker pool. A distributed executor (issue 9)
implements the same methods over the same store and data directory: the API does not change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

from service.config import Settings
from service.errors import Busy
from service.jobs.metrics import JobMetrics
from service.jobs.pool import WorkerPool, prepare_data_dir
from service.jobs.spec import REPORT_FILE, JobSpec
from service.jobs.store import JobRecord, JobStore

log = logging.getLogger("quantcompare.jobs")


def new_job_id() -> str:
    return uuid.uuid4().hex


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def cache_key(*, model: str, calibration: str | None, options: dict, versions: dict[str, str], extra: dict | None = None) -> str:
    """Same model bytes (or example) + calibration + resolved options + toolchain -> same key."""
    return hashlib.sha256(canonical_json({
        "model": model, "calibration": calibration, "options": options, "versions": versions, "extra": extra or {},
    }).encode()).hexdigest()


class LocalExecutor:
    # Hooks for other executors over the same store and data directory (celery_executor.py).
    store_class = JobStore

    def __init__(self, settings: Settings, *, start_pool: bool = True):
        self.settings = settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = self.store_class(settings.db_path)
        self.metrics = JobMetrics(store=self.store)
        self.pool = self._make_pool()
        self._start_pool = start_pool
        self.recovered: dict[str, list[str]] = {}
        self._room_lock = threading.Lock()

    def start(self) -> None:
        self.recovered = prepare_data_dir(self.settings, self.store)
        if self._start_pool:
            self.pool.start()

    def stop(self) -> None:
        self.pool.stop()
        self.store.close()

    def _make_pool(self) -> WorkerPool | None:
        return WorkerPool(self.settings, self.store, self.metrics)

    def _enqueue(self, spec: JobSpec) -> None:
        """The job is in the store as queued: hand it to whatever runs jobs (here: wake the pool)."""
        self.pool.wake()

    # -- staging: an upload lands in tmp/, and becomes a job folder only when complete ------
    def staging_dir(self) -> Path:
        path = self.settings.tmp_dir / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def make_room(self, input_bytes: int, staged: Path | None = None) -> None:
        """Evict finished jobs (oldest first) so a job with this input fits ``max_data_gb``, or 503."""
        if not self.settings.max_data_gb:
            return
        from service.errors import DataDirFull
        from service.jobs.disk import folder_bytes, jobs_on_disk, plan_for_new_job, reservation_for

        budget = int(self.settings.max_data_gb * 1e9)
        jobs = jobs_on_disk(self.settings.jobs_dir, self.store.statuses())
        # Uploads in flight count; this job's own upload is part of its reservation.
        other = folder_bytes(self.settings.tmp_dir) if self.settings.tmp_dir.is_dir() else 0
        other -= input_bytes if staged is not None else 0
        need = reservation_for(input_bytes)
        plan = plan_for_new_job(jobs, need=need, budget=budget, other_bytes=other)
        if not plan.fits:
            self.metrics.rejected.labels("data_dir_full").inc()
            raise DataDirFull(
                f"the data directory has no room for this job: it may need {need / 1e6:.0f} MB, "
                f"{plan.used / 1e6:.0f} MB are in use and {plan.reserved / 1e6:.0f} MB are held by queued and "
                f"running jobs, of a {budget / 1e9:g} GB budget (QUANTCOMPARE_MAX_DATA_GB)",
                hint="retry after the time in the Retry-After header, when running jobs have finished",
                retry_after=self.retry_after())
        for job_id in plan.evict:
            shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
            self.store.delete(job_id)
            log.info("evicted finished job %s to stay within QUANTCOMPARE_MAX_DATA_GB", job_id)

    def submit(self, spec: JobSpec, staged: Path | None, *, cache_key: str | None) -> JobRecord:
        job_dir = self.settings.jobs_dir / spec.id
        if self.settings.max_data_gb:
            from service.jobs.disk import folder_bytes

            with self._room_lock:  # two submissions must not both take the last room
                try:
                    self.make_room(folder_bytes(staged) if staged is not None else 0, staged)
                except BaseException:
                    if staged is not None:
                        shutil.rmtree(staged, ignore_errors=True)
                    raise
                return self._submit(spec, staged, cache_key=cache_key, job_dir=job_dir)
        return self._submit(spec, staged, cache_key=cache_key, job_dir=job_dir)

    def _submit(self, spec: JobSpec, staged: Path | None, *, cache_key: str | None, job_dir: Path) -> JobRecord:
        if staged is not None:
            os.replace(staged, job_dir)  # same filesystem: atomic, no copy
        else:
            job_dir.mkdir(parents=True)
        spec.write(job_dir)
        try:
            accepted = self.store.create(spec, cache_key=cache_key, max_queue=self.settings.max_queue)
        except BaseException:
            shutil.rmtree(job_dir, ignore_errors=True)
            raise
        if not accepted:
            shutil.rmtree(job_dir, ignore_errors=True)
            self.metrics.rejected.labels("queue_full").inc()
            raise Busy(f"the queue is full ({self.settings.max_queue} jobs waiting)",
                       hint="retry after the time in the Retry-After header", retry_after=self.retry_after())
        self._enqueue(spec)
        self.metrics.submitted.labels("example" if spec.example else "upload").inc()
        rec = self.store.get(spec.id)
        assert rec is not None
        return rec

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: one mean job time per queue-length/worker."""
        mean = self.store.mean_duration() or 10.0
        queued = self.store.counts()["queued"]
        return max(1, min(600, int(mean * max(1, queued) / self.settings.workers)))

    # -- reads ------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        return self.store.get(job_id)

    def job_dir(self, job_id: str) -> Path:
        return self.settings.jobs_dir / job_id

    def cached(self, key: str) -> list[JobRecord]:
        """Succeeded jobs with this key whose report is still on disk, newest first."""
        return [r for r in self.store.find_succeeded(key) if (self.job_dir(r.id) / REPORT_FILE).is_file()]


def make_executor(settings: Settings) -> LocalExecutor:
    """The executor ``QUANTCOMPARE_EXECUTOR`` names: the local pool, or Celery workers via a broker."""
    if settings.executor == "celery":
        from service.jobs.celery_executor import CeleryExecutor

        return CeleryExecutor(settings)
    return LocalExecutor(settings)
