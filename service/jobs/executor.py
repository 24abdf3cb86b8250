"""The job system as the API sees it: stage files, submit, look up, find a cached result.

``Executor`` is what the API relies on. Both implementations keep jobs in the same store and
data directory (``JobFolders``, below) and differ only in who runs them: ``LocalExecutor`` hands
them to this machine's worker pool, ``jobs.celery.executor.CeleryExecutor`` publishes them to a
broker for ``quantcompare worker`` processes. ``jobs.factory.make_executor`` picks one.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Protocol

from service.config import Settings
from service.errors import Busy
from service.jobs.metrics import JobMetrics
from service.jobs.pool import WorkerPool, prepare_data_dir
from service.jobs.spec import REPORT_FILE, JobSpec
from service.jobs.store import JobRecord, JobStore

log = logging.getLogger("quantcompare.jobs")


class Executor(Protocol):
    """What the API needs from the job system, whichever runs the jobs."""

    settings: Settings
    store: JobStore
    metrics: JobMetrics

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def staging_dir(self) -> Path: ...
    def submit(self, spec: JobSpec, staged: Path | None, *, cache_key: str | None) -> JobRecord: ...
    def retry_after(self) -> int: ...
    def get(self, job_id: str) -> JobRecord | None: ...
    def job_dir(self, job_id: str) -> Path: ...
    def cached(self, key: str) -> list[JobRecord]: ...


class JobFolders:
    """The part every executor shares: the job index, the job folders, submission and reads.

    A subclass says how a queued job reaches a worker (``_enqueue``) and how it starts and stops.
    """

    def __init__(self, settings: Settings, store: JobStore):
        self.settings = settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = store
        self.metrics = JobMetrics(store=self.store)
        self.recovered: dict[str, list[str]] = {}

    def _enqueue(self, spec: JobSpec) -> None:
        raise NotImplementedError

    # -- staging: an upload lands in tmp/, and becomes a job folder only when complete ------
    def staging_dir(self) -> Path:
        path = self.settings.tmp_dir / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def submit(self, spec: JobSpec, staged: Path | None, *, cache_key: str | None) -> JobRecord:
        job_dir = self.settings.jobs_dir / spec.id
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


class LocalExecutor(JobFolders):
    """Jobs run in this machine's supervised worker pool (``jobs.pool``)."""

    def __init__(self, settings: Settings, *, start_pool: bool = True):
        super().__init__(settings, JobStore(settings.db_path))
        self.pool = WorkerPool(settings, self.store, self.metrics)
        self._start_pool = start_pool

    def start(self) -> None:
        self.recovered = prepare_data_dir(self.settings, self.store)
        if self._start_pool:
            self.pool.start()

    def stop(self) -> None:
        self.pool.stop()
        self.store.close()

    def _enqueue(self, spec: JobSpec) -> None:
        """The job is in the store as queued: wake the pool."""
        self.pool.wake()
