"""``quantcompare worker``: a Celery worker that runs jobs exactly as the local pool does.

Each worker process hosts the local executor's own ``WorkerPool`` (pool.py): the same warm,
spawned worker processes, each its own process group under ``RLIMIT_AS``, watched for resident
memory, killed past the job time limit, recycled every ``QUANTCOMPARE_WORKER_MAX_JOBS`` jobs,
and the same reasons when a job's process dies (``worker died (SIGSEGV) during optimize``).
Only the source of jobs differs: instead of pulling the oldest queued row, the pool is fed the
ids that Celery delivers.

    Redis --message(job id)--> Celery task thread --hand over--> WorkerPool supervisor
                                    ^  waits                         claims the row, dispatches
                                    +------ finished / requeued ---- to a warm process, writes
                                                                     progress + outcome to the store

The Celery side runs the threads pool with one thread per pool process (``--concurrency`` =
``QUANTCOMPARE_WORKERS``) and prefetch 1, so a worker takes a message only when it has a free
process. The task thread acknowledges the message (acks_late) only once the job has finished,
so if this whole worker dies, the message goes back to the queue after the visibility timeout
and the store's claim (store.py) decides: run it again, or fail it as ``interrupted``.
A crash inside a job never reaches Celery at all: the supervisor fails that job with its reason
and the message is acknowledged normally (no retry of a model that segfaults).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from service.config import Settings
from service.errors import Interrupted
from service.jobs.celery.app import TASK_RUN_JOB, celery_app, require_broker, visibility_timeout_s
from service.jobs.celery.store import SharedJobStore
from service.jobs.db import open_database
from service.jobs.metrics import JobMetrics
from service.jobs.pool import STARTUP_TIMEOUT_S, WorkerPool
from service.jobs.storage import open_files
from service.jobs.store import JobRecord
from service.log_format import formatter
from service.schemas.api import problem_from_error

log = logging.getLogger("quantcompare.celery")


def lost_worker_problem(rec: JobRecord) -> dict:
    return problem_from_error(Interrupted(
        f"the worker running this job was lost {rec.attempts} time(s) (killed, or its machine went away) "
        f"{'during ' + rec.stage if rec.stage else 'before its first stage'}; it was not run again",
        hint="submit it again; if it keeps happening, the model may be taking its worker down",
        stage=rec.stage))


@dataclass(eq=False)
class Ticket:
    """One delivery of a job id, waiting for the pool: resolved with what became of it."""

    job_id: str
    event: threading.Event = field(default_factory=threading.Event)
    outcome: str | None = None  # finished | skip | failed | wait | requeued
    wait_s: float = 0.0

    def resolve(self, outcome: str, wait_s: float = 0.0) -> None:
        if not self.event.is_set():
            self.outcome, self.wait_s = outcome, wait_s
            self.event.set()


class HandoffStore(SharedJobStore):
    """The store as the pool inside a Celery worker sees it: ``claim_next`` claims the jobs
    Celery handed over (in order), and ``finish``/``requeue`` tell the waiting task."""

    def __init__(self, db, settings: Settings):
        super().__init__(db)
        self.settings = settings
        self._pending: deque[Ticket] = deque()
        self._running: dict[str, Ticket] = {}
        self._plock = threading.Lock()

    def hand_over(self, job_id: str) -> Ticket:
        ticket = Ticket(job_id)
        with self._plock:
            self._pending.append(ticket)
        return ticket

    def withdraw(self, ticket: Ticket) -> bool:
        """Take back a ticket the pool never claimed (True), e.g. when no process would start."""
        with self._plock:
            try:
                self._pending.remove(ticket)
                return True
            except ValueError:
                return False

    def claim_next(self) -> JobRecord | None:
        s = self.settings
        while True:
            with self._plock:
                if not self._pending:
                    return None
                ticket = self._pending.popleft()
            try:
                c = self.claim(ticket.job_id, job_timeout_s=s.job_timeout_s, lost_after_s=s.job_lost_after_s,
                               max_attempts=s.max_attempts, fail_problem=lost_worker_problem)
            except BaseException:
                # The store did not answer (a database restart): the ticket waits for the next tick,
                # first in line, rather than leaving its Celery thread waiting for nothing.
                with self._plock:
                    self._pending.appendleft(ticket)
                raise
            if c.action == "run":
                with self._plock:
                    self._running[ticket.job_id] = ticket
                if c.record.attempts > 1:
                    log.warning("job %s runs again (attempt %d): its worker was lost", c.record.id, c.record.attempts)
                return c.record
            if c.action == "skip" and c.record is None:
                log.warning("job %s is not in the store (%s): is this worker on the API's store?",
                            ticket.job_id, self.describe())
            elif c.action == "failed":
                log.warning("job %s failed: its worker was lost %d time(s)", ticket.job_id, c.record.attempts)
            ticket.resolve(c.action, c.wait_s)

    def _settle(self, job_id: str, outcome: str) -> None:
        with self._plock:
            ticket = self._running.pop(job_id, None)
        if ticket is not None:
            ticket.resolve(outcome)

    def finish(self, job_id, status, error=None) -> bool:
        try:
            return super().finish(job_id, status, error)
        finally:
            self._settle(job_id, "finished")

    def requeue(self, job_id, *, count_attempt: bool) -> None:
        try:
            super().requeue(job_id, count_attempt=count_attempt)
        finally:
            self._settle(job_id, "requeued")

    def release_all(self) -> None:
        """The worker is stopping: every ticket not yet settled goes back to the broker."""
        with self._plock:
            tickets = list(self._pending) + list(self._running.values())
            self._pending.clear()
            self._running.clear()
        for t in tickets:
            t.resolve("requeued")


class WorkerRuntime:
    """The pool and its hand-over store, one per ``quantcompare worker`` process."""

    def __init__(self, settings: Settings):
        self.settings = settings
        settings.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.store = HandoffStore(open_database(settings), settings)
        self.files = open_files(settings)
        self.metrics = JobMetrics(store=self.store)
        self.pool = WorkerPool(settings, self.store, self.metrics, files=self.files)

    def start(self) -> None:
        # With a bucket, jobs_dir is this worker's scratch: what a killed run left there is garbage
        # once no run of that job could still be going on.
        self.files.check()
        self.files.sweep_scratch(older_than=time.time() - visibility_timeout_s(self.settings))
        self.pool.start()

    def stop(self) -> None:
        self.pool.stop()  # requeues (in the store) any job still running: not counted as an attempt
        self.store.release_all()
        self.store.close()

    def run(self, job_id: str) -> Ticket:
        """Hand one delivered job id to the pool and wait for what became of it."""
        ticket = self.store.hand_over(job_id)
        self.pool.wake()
        # The pool claims a ticket only when one of its processes is idle; if none becomes idle
        # for this long (processes that will not start), give the message back for another worker.
        if not ticket.event.wait(STARTUP_TIMEOUT_S) and self.store.withdraw(ticket):
            log.error("no worker process took job %s within %.0f s; handing it back", job_id, STARTUP_TIMEOUT_S)
            ticket.resolve("requeued")
        ticket.event.wait()
        return ticket


def worker_app(settings: Settings, runtime: WorkerRuntime):
    from celery.exceptions import Reject

    app = celery_app(settings)

    @app.task(name=TASK_RUN_JOB, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None,
              ignore_result=True)
    def run_job(self, job_id: str) -> str:
        ticket = runtime.run(job_id)
        if ticket.outcome == "wait":
            # Another worker holds this job and may still be running it: look again after its deadline.
            raise self.retry(countdown=ticket.wait_s + 1.0)
        if ticket.outcome == "requeued":
            raise Reject("this worker is stopping", requeue=True)
        return ticket.outcome or "finished"

    return app


def default_node_name() -> str:
    return f"quantcompare-{os.getpid()}@{socket.gethostname()}"


def run_worker(settings: Settings, *, node_name: str | None = None) -> int:
    """Start the pool, then the Celery consumer (blocks until a warm shutdown: SIGTERM/Ctrl-C)."""
    from celery import signals
    from celery.utils.nodenames import default_nodename, host_format

    require_broker(settings)

    def escaped_lines(logger=None, **_):  # Celery sets up its own handlers: they format through ours
        for handler in getattr(logger, "handlers", []):
            handler.setFormatter(formatter(settings.log_format, role="celery"))

    signals.after_setup_logger.connect(escaped_lines, weak=False)
    signals.after_setup_task_logger.connect(escaped_lines, weak=False)
    node_name = host_format(default_nodename(node_name or default_node_name()))  # expands %h, adds @host
    runtime = WorkerRuntime(settings)
    app = worker_app(settings, runtime)
    runtime.start()
    try:
        worker = app.Worker(
            hostname=node_name, pool_cls="threads", concurrency=settings.workers,
            loglevel=settings.log_level.upper(), without_mingle=True, without_gossip=True, without_heartbeat=True,
            optimization="fair", queues=None,
        )
        worker.start()
        return worker.exitcode or 0
    finally:
        runtime.stop()
