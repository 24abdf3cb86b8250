"""The job system as the API sees it: stage files, submit, look up, find a cached result.

``Executor`` is what the API relies on. Both implementations keep jobs in the same store and
storage (``JobFolders``, below) and differ only in who runs them: ``LocalExecutor`` hands them to
this machine's worker pool, ``jobs.celery.executor.CeleryExecutor`` publishes them to a broker for
``quantcompare worker`` processes. ``jobs.factory.make_executor`` picks one. The store is a SQLite
file or PostgreSQL (``jobs/db/``), the files job folders or a bucket (``jobs/storage/``).
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid
from pathlib import Path
from typing import Protocol

from service.config import Settings
from service.errors import Busy, DataDirFull
from service.jobs.metrics import JobMetrics
from service.jobs.pool import WorkerPool, prepare_data_dir
from service.jobs.db import open_database
from service.jobs.spec import JobSpec
from service.jobs.storage import open_files
from service.jobs.storage.disk import (eviction_lock, folder_bytes, pinned_jobs, plan_for_new_job, reservation_for,
                                       unpin_job)
from service.jobs.storage.files import JobFiles
from service.jobs.store import JobRecord, JobStore

log = logging.getLogger("quantcompare.jobs")


class Executor(Protocol):
    """What the API needs from the job system, whichever runs the jobs."""

    settings: Settings
    store: JobStore
    files: JobFiles
    metrics: JobMetrics

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def staging_dir(self) -> Path: ...
    def submit(self, spec: JobSpec, staged: Path | None, *, cache_key: str | None) -> JobRecord:
        """A new queued job, or the queued/running job with the same ``cache_key`` (its record,
        whose id differs from ``spec.id``): identical submissions in flight join one job."""
        ...
    def retry_after(self) -> int: ...
    def get(self, job_id: str) -> JobRecord | None: ...
    def cancel(self, job_id: str) -> tuple[str, JobRecord | None]: ...
    def cached(self, key: str) -> list[JobRecord]: ...


class JobFolders:
    """The part every executor shares: the job index, the job files, submission and reads.

    A subclass says how a queued job reaches a worker (``_enqueue``) and how it starts and stops.
    """

    def __init__(self, settings: Settings, store: JobStore, files: JobFiles | None = None):
        self.settings = settings
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = store
        self.files = files or open_files(settings)
        self.metrics = JobMetrics(store=self.store)
        self.recovered: dict[str, list[str]] = {}
        self._room_lock = threading.Lock()

    def _enqueue(self, spec: JobSpec) -> None:
        raise NotImplementedError

    # -- staging: an upload lands in tmp/, and becomes a job folder only when complete ------
    def staging_dir(self) -> Path:
        path = self.settings.tmp_dir / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def make_room(self, input_bytes: int, staged: Path | None = None) -> None:
        """Evict finished jobs (oldest first) so a job with this input fits ``max_data_gb``, or 503."""
        if not self.settings.max_data_gb:
            return
        budget = int(self.settings.max_data_gb * 1e9)
        with eviction_lock(self.settings.data_dir):  # no download pins a job between the plan and the delete
            jobs = self.files.usage(self.store.statuses())
            # Uploads in flight count; this job's own upload is part of its reservation.
            other = folder_bytes(self.settings.tmp_dir) if self.settings.tmp_dir.is_dir() else 0
            other -= input_bytes if staged is not None else 0
            need = reservation_for(input_bytes)
            plan = plan_for_new_job(jobs, need=need, budget=budget, other_bytes=other,
                                    pinned=pinned_jobs(self.settings.data_dir))
            if not plan.fits:
                self.metrics.rejected.labels("data_dir_full").inc()
                raise DataDirFull(
                    f"the data directory has no room for this job: it may need {need / 1e6:.0f} MB, "
                    f"{plan.used / 1e6:.0f} MB are in use and {plan.reserved / 1e6:.0f} MB are held by queued and "
                    f"running jobs, of a {budget / 1e9:g} GB budget (QUANTCOMPARE_MAX_DATA_GB)",
                    hint="retry after the time in the Retry-After header, when running jobs have finished",
                    retry_after=self.retry_after())
            for job_id in plan.evict:
                self.files.delete(job_id)
                self.store.delete(job_id)
                log.info("evicted finished job %s to stay within QUANTCOMPARE_MAX_DATA_GB", job_id)

    def submit(self, spec: JobSpec, staged: Path | None, *, cache_key: str | None) -> JobRecord:
        if self.settings.max_data_gb:
            with self._room_lock:  # two submissions must not both take the last room
                # The join first: an identical job in flight takes no room, so a full data dir must not
                # refuse it (make_room would answer 503 for a job that is never created).
                joined = self.store.join_in_flight(cache_key) if cache_key is not None else None
                if joined is not None:
                    if staged is not None:
                        shutil.rmtree(staged, ignore_errors=True)
                    self.metrics.joined.inc()
                    return joined
                try:
                    self.make_room(folder_bytes(staged) if staged is not None else 0, staged)
                except BaseException:
                    if staged is not None:
                        shutil.rmtree(staged, ignore_errors=True)
                    raise
                return self._submit(spec, staged, cache_key=cache_key)
        return self._submit(spec, staged, cache_key=cache_key)

    def _submit(self, spec: JobSpec, staged: Path | None, *, cache_key: str | None) -> JobRecord:
        self.files.create(spec, staged)  # the inputs are stored before the row that lets a worker claim them
        try:
            answer = self.store.create_or_join(spec, cache_key=cache_key, max_queue=self.settings.max_queue)
        except BaseException:
            self.files.delete(spec.id)
            raise
        if answer is not None and answer != spec.id:
            # An identical job (same cache key) is queued or running: this submission joins it
            # (a CI matrix posting one model from several jobs at once gets one job, not 503s).
            self.files.delete(spec.id)
            joined = self.store.get(answer)
            if joined is not None:
                self.metrics.joined.inc()
                return joined
            answer = None  # vanished between the two reads (deleted): treat as no room, the client retries
        if answer is None:
            self.files.delete(spec.id)
            self.metrics.rejected.labels("queue_full").inc()
            raise Busy(f"the queue is full ({self.settings.max_queue} jobs waiting)",
                       hint="retry after the time in the Retry-After header", retry_after=self.retry_after())
        self._enqueue(spec)
        self.metrics.submitted.labels("example" if spec.example else "upload").inc()
        rec = self.store.get(spec.id)
        assert rec is not None
        return rec

    # -- cancel ----------------------------------------------------------------------------
    def cancel(self, job_id: str) -> tuple[str, JobRecord | None]:
        """DELETE: one submitter withdraws. While other joiners wait the job runs on (``"kept"``);
        otherwise its row goes first (no worker claims it any more, the one running it stops it:
        ``WorkerPool._stop_cancelled``), then its files and its download pins (``"deleted"``)."""
        outcome, rec = self.store.cancel(job_id)
        if outcome == "deleted":
            self.files.delete(job_id)
            unpin_job(self.settings.data_dir, job_id)
            self.metrics.cancelled.labels(rec.status).inc()
            self._cancelled(job_id)
            log.info("job %s cancelled (%s)", job_id, rec.status)
        return outcome, rec

    def _cancelled(self, job_id: str) -> None:
        """Tell whoever runs jobs here that one was deleted (a Celery worker finds out from the store)."""

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: one mean job time per queue-length/worker."""
        mean = self.store.mean_duration() or 10.0
        queued = self.store.counts()["queued"]
        return max(1, min(600, int(mean * max(1, queued) / self.settings.workers)))

    # -- reads ------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        return self.store.get(job_id)

    def job_dir(self, job_id: str) -> Path:
        """The job's folder on this machine (with a bucket: a worker's scratch while it runs there)."""
        return self.settings.jobs_dir / job_id

    def cached(self, key: str) -> list[JobRecord]:
        """Succeeded jobs with this key whose report is still stored, newest first."""
        return [r for r in self.store.find_succeeded(key) if self.files.report_version(r.id) is not None]


class LocalExecutor(JobFolders):
    """Jobs run in this machine's supervised worker pool (``jobs.pool``)."""

    def __init__(self, settings: Settings, *, start_pool: bool = True):
        super().__init__(settings, JobStore(open_database(settings)))
        self.pool = WorkerPool(settings, self.store, self.metrics, files=self.files)
        self._start_pool = start_pool

    def start(self) -> None:
        self.files.check()
        self.recovered = prepare_data_dir(self.settings, self.store, self.files)
        if self._start_pool:
            self.pool.start()

    def stop(self) -> None:
        self.pool.stop()
        self.store.close()

    def _enqueue(self, spec: JobSpec) -> None:
        """The job is in the store as queued: wake the pool."""
        self.pool.wake()

    def _cancelled(self, job_id: str) -> None:
        self.pool.wake()  # its next tick stops the job's process now, not at the next check
