"""The local executor: a pool of warm worker processes and the supervisor thread that runs it.

Why not ``ProcessPoolExecutor``: one dead worker poisons it (every pending future fails with
BrokenProcessPool). Here each worker is its own ``spawn``ed process on its own pipe; the
supervisor notices a death through the process sentinel, fails only the job that worker
held (with the signal and the stage in the reason), and starts a replacement.

The supervisor also enforces the limits: wall-clock per job (SIGKILL to the worker's process
group), resident memory per worker (on top of the worker's own RLIMIT_AS), and recycling a
worker after ``worker_max_jobs`` jobs. Progress messages go straight to the store, so any
API process reading the store sees them.

Where a job runs is the storage's to say (``jobs/storage/``): its own folder in the data directory,
or, with a bucket, a scratch folder filled with its inputs at dispatch. A succeeded job's results
are stored (``checkin``: to the bucket, on a thread of its own so this loop keeps watching the other
workers) before its row says "succeeded".

Workers are started with the 'spawn' context: the API process never imports torch, and no
process ever forks after torch is imported.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from multiprocessing import spawn
from multiprocessing.connection import wait
from pathlib import Path

import psutil

from service.config import Settings
from service.errors import (InternalError, Interrupted, JobCancelled, JobFolderMissing, JobTimeout,
                            StorageUnavailable, StoreUnavailable, WorkerDied, WorkerMemoryLimit, error_from_os)
from service.jobs.metrics import JobMetrics
from service.jobs.spec import JobSpec
from service.jobs.storage import open_files
from service.jobs.storage.files import JobFiles
from service.jobs.store import JobRecord, JobStore
from service.jobs.storage.disk import eviction_lock, pinned_jobs
from service.jobs.worker import clean_env_launcher, worker_main
from service.schemas.api import problem_from_error

log = logging.getLogger("quantcompare.pool")

STARTUP_TIMEOUT_S = 300.0
MEMORY_CHECK_EVERY_S = 0.5
HOUSEKEEPING_EVERY_S = 600.0
# How often the running jobs' rows are looked up: a row that is gone was cancelled (DELETE), on this API
# or another machine's, and its process is killed. One indexed query per tick at most this often.
CANCEL_CHECK_EVERY_S = 0.5
# A job's outcome is written to the store however long a database restart takes, up to this: the
# job's work is not thrown away for a store that is back in seconds (past it, its row stays
# "running" and the deadline rules of recovery apply).
STORE_RETRY_S = 120.0


@dataclass(eq=False)
class _Worker:
    process: multiprocessing.Process
    conn: object
    spawned_at: float
    state: str = "starting"  # starting | idle | busy | retiring
    job: JobRecord | None = None
    folder: Path | None = None  # where the job runs (storage.checkout)
    job_started: float = 0.0
    stage: str | None = None
    stage_started: float = 0.0
    jobs_run: int = 0
    kill_reason: dict | None = None
    peak_rss_mb: float = 0.0
    extra: dict = field(default_factory=dict)


def _stage_words(stage: str | None) -> str:
    return f"during {stage}" if stage else "before its first stage"


def _timeout_hint(stage: str | None) -> str:
    hint = "try a smaller model or fewer samples, or raise QUANTCOMPARE_JOB_TIMEOUT_S"
    if stage == "quantize":  # the PT2E path is the long one there (docs/history/notes.md, "fifth pass")
        hint = ("the PT2E path's time grows with the torch graph (unrolled LSTM/GRU steps above all): a lower "
                "options.pt2e.time_limit_s or max_graph_ops stops it sooner, a shorter sequence in options.input_shapes shrinks it, "
                "options.artifacts without pt2e_qdq gets the ORT results; or " + hint)
    return hint


class WorkerPool:
    def __init__(self, settings: Settings, store: JobStore, metrics: JobMetrics | None = None,
                 files: JobFiles | None = None):
        self.settings = settings
        self.store = store
        self.files = files or open_files(settings)
        self._checkins: set[threading.Thread] = set()
        self.metrics = metrics or JobMetrics(store=store)
        self.metrics.bind(store=store, pool=self)
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._thread: threading.Thread | None = None
        self._spawn_failures = 0
        self._next_spawn_at = 0.0
        self._last_memory_check = 0.0
        self._last_cancel_check = 0.0
        self._last_housekeeping = time.monotonic()
        self._states_lock = threading.Lock()
        self._states: dict[str, int] = {"starting": 0, "idle": 0, "busy": 0}

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="quantcompare-supervisor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout)
        for t in list(self._checkins):  # results being stored: let them land (the row follows them)
            t.join(timeout)

    def wake(self) -> None:
        """A job was queued: dispatch now rather than at the next tick."""
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass

    def worker_states(self) -> dict[str, int]:
        with self._states_lock:
            return dict(self._states)

    def worker_pids(self) -> dict[str, list[int]]:
        """Pids by state (tests and diagnostics)."""
        out: dict[str, list[int]] = {}
        for w in list(self._workers):
            out.setdefault(w.state, []).append(w.process.pid)
        return out

    # -- supervisor loop ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self._fill()
                    self._dispatch()
                    self._wait_and_handle(0.25)
                    self._reap()
                    self._enforce_limits()
                    self._stop_cancelled()
                    self._housekeeping()
                    self._publish_states()
                except Exception:  # the supervisor must outlive any one bad tick
                    log.exception("supervisor tick failed")
                    time.sleep(0.5)
        finally:
            self._shutdown_workers()

    def _publish_states(self) -> None:
        states = {"starting": 0, "idle": 0, "busy": 0}
        for w in self._workers:
            if w.state in states:
                states[w.state] += 1
        with self._states_lock:
            self._states = states

    def _fill(self) -> None:
        live = [w for w in self._workers if w.state != "retiring"]
        now = time.monotonic()
        if len(live) < self.settings.workers and now >= self._next_spawn_at:
            for _ in range(self.settings.workers - len(live)):
                self._spawn()

    def _spawn(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        s = self.settings
        proc = self._ctx.Process(
            target=worker_main, args=(child,), daemon=True, name="quantcompare-worker",
            kwargs={"preload": s.preload_modules, "job_function": s.job_function,
                    "memory_mb": s.worker_memory_mb, "log_level": s.log_level, "log_format": s.log_format},
        )
        # A worker starts from a minimal environment (no QUANTCOMPARE_* secrets, no credentials of the
        # operator's shell): spawn execs a launcher that clears the environment first (worker.py).
        # Only this supervisor thread spawns in the API process, so the swap of spawn's executable is safe.

        if not hasattr(self, "_launcher"):
            self._launcher = clean_env_launcher()  # in the machine's temp dir, private to this process
        previous = spawn.get_executable()
        if self._launcher:
            spawn.set_executable(self._launcher)
        try:
            proc.start()
        finally:
            spawn.set_executable(previous)
        child.close()
        self._workers.append(_Worker(process=proc, conn=parent, spawned_at=time.monotonic()))
        log.info("started worker %s", proc.pid)

    def _dispatch(self) -> None:
        for w in self._workers:
            if w.state != "idle":
                continue
            rec = self.store.claim_next()
            if rec is None:
                return
            try:
                job_dir = self.files.checkout(rec)  # a re-run (attempt > 1) gets its inputs only
            except FileNotFoundError:  # an input went between the listing and its copy
                job_dir = None
            except StorageUnavailable as e:
                self._finish(rec, None, "failed", problem_from_error(StorageUnavailable(
                    f"the job's inputs could not be read from storage: {e.message}", hint="submit the model again")))
                continue
            except OSError as e:  # this machine's scratch: full, or not writable
                error = error_from_os(e, "the job's inputs were copied to this worker's scratch") or InternalError(
                    "the job's inputs could not be copied to this worker's scratch", hint="the server log has the details")
                log.error("job %s: checkout failed: %s", rec.id, e)
                self._finish(rec, None, "failed", problem_from_error(error))
                continue
            if job_dir is None:
                self._finish(rec, None, "failed", problem_from_error(JobFolderMissing(
                    "the job's folder was removed before it could run", hint="submit the model again")))
                continue
            try:
                w.conn.send({"job": self._with_cores(rec.spec).to_json(), "job_dir": str(job_dir.resolve())})
            except (OSError, ValueError):
                self.files.discard(rec.id, job_dir)
                self.store.requeue(rec.id, count_attempt=False)
                self._kill(w, None)
                continue
            now = time.monotonic()
            w.state, w.job, w.folder, w.job_started, w.stage, w.stage_started = "busy", rec, job_dir, now, None, now
            w.peak_rss_mb = 0.0
            log.info("job %s -> worker %s", rec.id, w.process.pid)

    def _with_cores(self, spec: JobSpec) -> JobSpec:
        """The spec with this machine's bound on a job's cores and its cores ledger: the pool that runs a job
        decides (a Celery worker's machine may differ from the API's)."""
        cores, source = self.settings.cores_per_job
        ledger = str(self.settings.cores_ledger) if self.settings.cores_ledger is not None else None
        return dataclasses.replace(spec, job_cores=cores, job_cores_source=source, job_cores_ledger=ledger)

    def _wait_and_handle(self, timeout: float) -> None:
        objs: list = [self._wake_r]
        for w in self._workers:
            objs += [w.conn, w.process.sentinel]
        ready = wait(objs, timeout)
        if self._wake_r in ready:
            try:
                while self._wake_r.recv(4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        for w in self._workers:
            self._drain(w)

    def _drain(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                self._handle(w, w.conn.recv())
        except (EOFError, OSError):
            pass

    def _handle(self, w: _Worker, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "ready":
            if w.state == "starting":
                w.state = "idle"
                self._spawn_failures = 0
            return
        if w.job is None or msg.get("job") != w.job.id:
            return
        now = time.monotonic()
        if kind == "progress":
            stage = str(msg["stage"])
            if stage != w.stage:
                if w.stage is not None:
                    self.metrics.stage_seconds.labels(w.stage).observe(now - w.stage_started)
                w.stage, w.stage_started = stage, now
            try:
                self.store.set_progress(w.job.id, stage, msg.get("done", 0), msg.get("total", 0))
            except StoreUnavailable:  # progress is advice: the next message says it again
                log.warning("job %s: progress not stored, the job store did not answer", w.job.id)
            if self.files.stores_elsewhere and w.folder is not None:
                # A section finished since: the report as it comes goes where the API reads it (a bucket).
                self.files.store_partial(w.job.id, w.folder)
        elif kind == "done":
            if w.stage is not None and msg["status"] == "succeeded":
                self.metrics.stage_seconds.labels(w.stage).observe(now - w.stage_started)
            args = (w.job, w.folder, now - w.job_started, msg["status"], msg.get("error"))
            if msg["status"] == "succeeded" and self.files.stores_elsewhere:
                t = threading.Thread(target=self._check_in, args=args, name=f"quantcompare-checkin-{w.job.id}",
                                     daemon=True)
                self._checkins.add(t)
                t.start()
            else:
                self._check_in(*args)
            w.job, w.folder, w.stage = None, None, None
            w.jobs_run += 1
            w.state = "idle"
            if msg.get("exiting") or w.jobs_run >= self.settings.worker_max_jobs:
                w.state = "retiring"
                try:
                    w.conn.send(None)
                except (OSError, ValueError):
                    pass

    def _check_in(self, rec: JobRecord, folder: Path | None, seconds: float, status: str, error: dict | None) -> None:
        """A job that ended: its results stored when it succeeded, its scratch dropped, then its row."""
        try:
            if status == "succeeded" and folder is not None:
                self.files.checkin(rec.id, folder)
        except StorageUnavailable as e:
            status, error = "failed", problem_from_error(StorageUnavailable(
                f"the job's results could not be stored: {e.message}", hint="submit the model again"))
        except Exception as e:  # noqa: BLE001 - this machine's scratch (OSError) or a bug: the job ends, said so
            log.error("job %s: storing its results failed: %r", rec.id, e, exc_info=True)
            status, error = "failed", problem_from_error(
                error_from_os(e, "the job's results were read from this worker's scratch")
                or InternalError("the job's results could not be stored",
                                 hint="the server log has the details; submit the model again"))
        finally:
            if folder is not None:
                self.files.discard(rec.id, folder)
            self._checkins.discard(threading.current_thread())
        self._finish(rec, seconds, status, error)

    def _finish(self, rec: JobRecord, seconds: float | None, status: str, error: dict | None) -> None:
        if not _retrying_store(lambda: self.store.finish(rec.id, status, error), f"job {rec.id}'s outcome"):
            if self.store.get(rec.id) is None:
                # Cancelled while it ran: what it stored since the API deleted its files goes too.
                self.files.delete(rec.id)
            return
        code = (error or {}).get("code", "") if status == "failed" else ""
        self.metrics.finished.labels(status, code).inc()
        if seconds is not None:
            self.metrics.job_seconds.labels(status).observe(seconds)
        log.info("job %s %s%s", rec.id, status, f" ({error.get('detail')})" if error else "")

    def _reap(self) -> None:
        for w in list(self._workers):
            if w.process.is_alive():
                continue
            self._drain(w)  # a "done" sent just before exiting still counts
            w.process.join(0.1)
            code = w.process.exitcode
            if w.job is not None:
                err = w.kill_reason or self._death_problem(w, code)
                self._check_in(w.job, w.folder, time.monotonic() - w.job_started, "failed", err)
                if err["code"] != JobCancelled.code:
                    self.metrics.worker_deaths.labels(err["code"]).inc()
                log.warning("worker %s died (exit %s) while running job %s", w.process.pid, code, w.job.id)
            elif w.state == "starting":
                self._spawn_failures += 1
                self._next_spawn_at = time.monotonic() + min(30.0, 0.5 * 2 ** self._spawn_failures)
                self.metrics.worker_deaths.labels("startup").inc()
                log.error("worker %s died during start-up (exit %s)", w.process.pid, code)
            elif w.state != "retiring":
                self.metrics.worker_deaths.labels("idle").inc()
                log.warning("idle worker %s exited (exit %s)", w.process.pid, code)
            try:
                w.conn.close()
            except OSError:
                pass
            w.process.close()
            self._workers.remove(w)

    def _death_problem(self, w: _Worker, code: int | None) -> dict:
        where = _stage_words(w.stage)
        limit = self.settings.worker_memory_mb
        sig = None
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            detail = f"worker died ({sig}) {where}"
            if sig == "SIGKILL":
                hint = "something outside quantcompare killed the worker, often the kernel's out-of-memory killer"
            else:
                hint = ("a crash in native code (torch, onnx or onnxruntime) on this model"
                        + (f"; under the {limit} MiB memory limit, running out of memory can end this way too"
                           if limit else ""))
        else:
            detail = f"worker exited with status {code} {where}"
            hint = "the server log has the worker's last words"
        return problem_from_error(WorkerDied(detail, hint=hint, stage=w.stage, signal=sig))

    def _enforce_limits(self) -> None:
        now = time.monotonic()
        check_memory = self.settings.worker_memory_mb and now - self._last_memory_check >= MEMORY_CHECK_EVERY_S
        if check_memory:
            self._last_memory_check = now
        for w in self._workers:
            if w.kill_reason is not None:
                continue
            if w.state == "starting" and now - w.spawned_at > STARTUP_TIMEOUT_S:
                log.error("worker %s did not start within %s s", w.process.pid, STARTUP_TIMEOUT_S)
                self._kill(w, None)
            elif w.state == "busy":
                limit_s = self.settings.job_timeout_s
                if now - w.job_started > limit_s:
                    self._kill(w, problem_from_error(JobTimeout(
                        f"the job ran past its time limit of {limit_s:g} s {_stage_words(w.stage)}; its worker was killed",
                        hint=_timeout_hint(w.stage), stage=w.stage)))
                elif check_memory:
                    rss_mb = _tree_rss_mb(w.process.pid)
                    w.peak_rss_mb = max(w.peak_rss_mb, rss_mb)
                    if rss_mb > self.settings.worker_memory_mb:
                        self._kill(w, problem_from_error(WorkerMemoryLimit(
                            f"the worker used {rss_mb:.0f} MiB, past its limit of {self.settings.worker_memory_mb} MiB, "
                            f"{_stage_words(w.stage)}; it was killed",
                            hint="try a smaller model or fewer samples, or raise QUANTCOMPARE_WORKER_MEMORY_MB",
                            stage=w.stage)))

    def _stop_cancelled(self) -> None:
        """Kill the process of every running job whose row was deleted (cancelled): its process group
        goes whole, and ``_reap`` then drops its scratch and, the row being gone, its stored files."""
        now = time.monotonic()
        busy = [w for w in self._workers if w.state == "busy" and w.job is not None and w.kill_reason is None]
        if not busy or now - self._last_cancel_check < CANCEL_CHECK_EVERY_S:
            return
        self._last_cancel_check = now
        try:
            present = self.store.present([w.job.id for w in busy])
        except StoreUnavailable:
            return  # the store is away: nobody could have deleted a row meanwhile that we can see
        for w in busy:
            if w.job.id not in present:
                log.info("job %s was cancelled %s; killing worker %s", w.job.id, _stage_words(w.stage), w.process.pid)
                self._kill(w, problem_from_error(JobCancelled(
                    f"the job was cancelled {_stage_words(w.stage)}", hint="submit it again to run it",
                    stage=w.stage)))

    def _kill(self, w: _Worker, reason: dict | None) -> None:
        w.kill_reason = reason
        pid = w.process.pid
        try:
            os.killpg(pid, signal.SIGKILL)  # the worker leads its own group: take everything it started
        except (ProcessLookupError, PermissionError):
            try:
                w.process.kill()
            except (OSError, ValueError):
                pass

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_housekeeping < HOUSEKEEPING_EVERY_S:
            return
        self._last_housekeeping = now
        sweep_expired(self.settings, self.store, self.files)

    def _shutdown_workers(self) -> None:
        for w in self._workers:
            if w.job is not None:
                # Stopping is not the job's fault: it runs again at the next start, attempt not counted.
                if w.folder is not None:
                    self.files.discard(w.job.id, w.folder)
                self.store.requeue(w.job.id, count_attempt=False)
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
            if w.state == "busy":
                self._kill(w, None)
        deadline = time.monotonic() + 2.0
        for w in self._workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                self._kill(w, None)
                w.process.join(1.0)
        self._workers.clear()
        self._publish_states()


def _retrying_store(write, what: str):
    """``write()``, again every few seconds while the job store does not answer, for up to STORE_RETRY_S."""
    deadline, delay = time.monotonic() + STORE_RETRY_S, 0.5
    while True:
        try:
            return write()
        except StoreUnavailable as e:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s not stored yet (%s); trying again in %.1f s", what, e.message, delay)
            time.sleep(delay)
            delay = min(5.0, delay * 2)


def _tree_rss_mb(pid: int) -> float:
    try:
        p = psutil.Process(pid)
        rss = p.memory_info().rss
        for c in p.children(recursive=True):
            try:
                rss += c.memory_info().rss
            except psutil.Error:
                pass
        return rss / (1024 * 1024)
    except psutil.Error:
        return 0.0


# -- data directory lifecycle --------------------------------------------------------------
def interrupted_problem(rec: JobRecord) -> dict:
    return problem_from_error(Interrupted(
        f"the service stopped while this job was running, {rec.attempts} time(s); it was not run again",
        hint="submit it again; if it keeps happening, the model may be taking the whole service down",
        stage=rec.stage))


def prepare_data_dir(settings: Settings, store: JobStore, files: JobFiles | None = None) -> dict[str, list[str]]:
    """At start: recover interrupted jobs, drop uploads in flight, scratch, and stored jobs no row owns."""
    files = files or open_files(settings)
    settings.jobs_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(settings.tmp_dir, ignore_errors=True)
    settings.tmp_dir.mkdir(parents=True, exist_ok=True)
    files.sweep_scratch()  # no job runs here yet
    requeued, failed = store.recover(max_attempts=settings.max_attempts, fail_problem=interrupted_problem)
    swept = files.sweep_unknown(store.ids())
    expired = sweep_expired(settings, store, files)
    if requeued or failed or swept or expired:
        log.info("recovered: %d re-queued, %d failed as interrupted, %d stale folders swept, %d expired",
                 len(requeued), len(failed), len(swept), len(expired))
    return {"requeued": requeued, "failed": failed, "swept": swept, "expired": expired}


def sweep_expired(settings: Settings, store: JobStore, files: JobFiles | None = None) -> list[str]:
    """Delete finished jobs past the retention, but not one a download has pinned (its next sweep will)."""
    if not settings.retention_hours:
        return []
    files = files or open_files(settings)
    with eviction_lock(settings.data_dir):
        pinned = pinned_jobs(settings.data_dir)
        ids = [j for j in store.finished_before(time.time() - settings.retention_hours * 3600) if j not in pinned]
        for job_id in ids:
            files.delete(job_id)
            store.delete(job_id)
    return ids
