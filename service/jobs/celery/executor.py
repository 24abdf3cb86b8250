"""The API's side of the Celery executor: same store, same job files, jobs published to Redis.

``CeleryExecutor`` shares ``JobFolders`` with the local executor: submission stores the job's
files and inserts the queued row exactly as there, then publishes the job id. Workers started with
``quantcompare worker`` (worker.py) claim and run it, writing state and progress to the
same store the API reads (a SQLite file on the shared data directory, or PostgreSQL), and the report
and artifacts to the same storage (the shared data directory, or a bucket).

Several API processes may share one store, storage and broker, so start-up here touches nothing
another process may own: no tmp wipe, no re-queue of running jobs (they run on workers). A
reconciler thread covers what the broker cannot:

- when the broker holds no message at all but the store has jobs queued for a while, or
  ``running`` past their deadline, the broker lost them (e.g. Redis restarted without
  persistence): they are published again, and the workers' claim runs each once more, or fails
  it as ``interrupted`` once it used its attempts;
- finished jobs past the retention are deleted, as the local pool's housekeeping does, and so are
  files no row owns once they are ``STALE_AFTER_S`` old (an API that died mid-submission).

A duplicate message is always harmless (see store.py), so the reconciler errs on the
side of publishing.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time

from service.config import Settings
from service.errors import Busy
from service.jobs.celery.app import QUEUE, TASK_RUN_JOB, celery_app, require_broker
from service.jobs.celery.store import SharedJobStore
from service.jobs.db import open_database
from service.jobs.executor import JobFolders
from service.jobs.pool import sweep_expired
from service.jobs.spec import JobSpec
from service.jobs.storage.files import JobFiles
from service.jobs.storage.folders import last_changed

log = logging.getLogger("quantcompare.celery")

# Uploads in flight and job folders without a row are someone's work in progress for a while:
# another API process may be writing them right now. Only older leftovers are removed.
STALE_AFTER_S = 3600.0
# Queued jobs younger than this (or than job_lost_after_s) are not republished even if the
# broker looks empty: the publish of a job just inserted may still be on its way.
REPUBLISH_QUEUED_AFTER_S = 30.0
HOUSEKEEPING_EVERY_S = 600.0
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


class CeleryExecutor(JobFolders):
    """Jobs published to the broker; ``quantcompare worker`` processes claim and run them."""

    def __init__(self, settings: Settings):
        require_broker(settings)
        super().__init__(settings, SharedJobStore(open_database(settings)))
        self.app = celery_app(settings)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._republished: dict[str, float] = {}
        self.reconcile_every_s = max(1.0, min(30.0, settings.job_lost_after_s / 2))

    def start(self) -> None:
        self.files.check()
        self.recovered = prepare_shared_data_dir(self.settings, self.store, self.files)
        self._thread = threading.Thread(target=self._reconcile_loop, name="quantcompare-reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.store.close()

    # -- publishing -------------------------------------------------------------------------
    def publish(self, job_id: str) -> None:
        self.app.send_task(TASK_RUN_JOB, args=[job_id], queue=QUEUE, retry=True, retry_policy=_PUBLISH_RETRY)

    def _enqueue(self, spec: JobSpec) -> None:
        try:
            self.publish(spec.id)
        except Exception as e:
            # Not queued anywhere a worker will look: take the job back so nothing waits forever.
            log.error("could not publish job %s to the broker: %s", spec.id, e)
            self.store.delete(spec.id)
            self.files.delete(spec.id)
            self.metrics.rejected.labels("broker_unreachable").inc()
            raise Busy("the job queue (broker) is unreachable", hint="retry after the time in the Retry-After header",
                       retry_after=5) from e

    # -- reconciler -------------------------------------------------------------------------
    def _reconcile_loop(self) -> None:
        last_housekeeping = time.monotonic()
        while not self._stop.wait(self.reconcile_every_s):
            try:
                self.reconcile()
                if time.monotonic() - last_housekeeping >= HOUSEKEEPING_EVERY_S:
                    last_housekeeping = time.monotonic()
                    sweep_expired(self.settings, self.store, self.files)
                    # Files of a submission whose API died between storing them and inserting the row.
                    self.files.sweep_unknown(self.store.ids(), older_than=time.time() - STALE_AFTER_S)
            except Exception:  # a broker or store hiccup: try again next tick
                log.warning("reconcile failed", exc_info=True)

    def reconcile(self) -> list[str]:
        """Publish again the jobs the broker has lost track of; returns their ids."""
        s, now = self.settings, time.time()
        self._republished = {k: t for k, t in self._republished.items() if now - t < s.job_lost_after_s}
        stuck = self.store.running_started_before(now - s.job_timeout_s - s.job_lost_after_s)
        stuck += self.store.queued_before(now - min(REPUBLISH_QUEUED_AFTER_S, s.job_lost_after_s))
        ids = [j for j in stuck if j not in self._republished]
        # While the broker holds any message, a lost worker's job is still there (unacknowledged,
        # restored after the visibility timeout): only an empty broker has lost something.
        if not ids or not self.broker_is_empty():
            return []
        for job_id in ids:
            self.publish(job_id)
            self._republished[job_id] = now
        if ids:
            log.warning("republished %d job(s) the broker had lost: %s", len(ids), ", ".join(ids))
        return ids

    def broker_is_empty(self) -> bool:
        """No message waiting and none held by a worker (kombu's Redis layout)."""
        with self.app.connection_for_write() as conn:
            client = conn.default_channel.client
            return client.llen(QUEUE) == 0 and client.hlen("unacked") == 0


def prepare_shared_data_dir(settings: Settings, store: SharedJobStore, files: JobFiles) -> dict[str, list[str]]:
    """The shared counterpart of ``pool.prepare_data_dir``: only old leftovers are removed."""
    settings.jobs_dir.mkdir(parents=True, exist_ok=True)
    settings.tmp_dir.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - STALE_AFTER_S
    for entry in settings.tmp_dir.iterdir():
        if last_changed(entry) < cutoff:
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    swept = files.sweep_unknown(store.ids(), older_than=cutoff)
    expired = sweep_expired(settings, store, files)
    return {"requeued": [], "failed": [], "swept": swept, "expired": expired}
