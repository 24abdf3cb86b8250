"""Real Redis, real `quantcompare worker` processes and real API servers on loopback.

Nothing here is a system service: each ``RedisServer`` is a ``redis-server`` child of the test
run on a free port, with its files in a temporary folder.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.missing_tools import skip_or_fail

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import QUANTCOMPARE, LiveServer, free_port  # noqa: E402

REDIS_SERVER = shutil.which("redis-server")

# The same limits tests/api's server runs with, plus how soon a lost worker's job is run again.
API_SETTINGS = dict(workers=1, job_timeout_s=5, worker_memory_mb=1024, max_upload_mb=64, max_calibration_mb=8,
                    max_queue=50, job_lost_after_s=2)


def require_redis_server() -> str:
    if REDIS_SERVER is None:
        msg = "redis-server is not installed (Debian: apt-get install redis-server; `make system-deps` does it)"
        skip_or_fail(msg)
    return REDIS_SERVER


class RedisServer:
    def __init__(self, folder: Path, *, persistent: bool = True):
        self.folder = folder
        self.port = free_port()
        self.persistent = persistent
        self.proc: subprocess.Popen | None = None
        self._db = 0

    def url(self, db: int | None = None) -> str:
        return f"redis://127.0.0.1:{self.port}/{self._db if db is None else db}"

    def new_db_url(self) -> str:
        """A database of its own per cluster: one cluster's workers never see another's jobs."""
        self._db += 1
        assert self._db < 16
        return self.url(self._db)

    def start(self) -> "RedisServer":
        self.folder.mkdir(parents=True, exist_ok=True)
        args = [require_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
                "--save", "", "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning",
                "--logfile", str(self.folder / "redis.log")]
        # The compose profile's broker keeps an append-only file, so a restart loses nothing.
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                if redis.Redis(port=self.port, socket_connect_timeout=0.5).ping():
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start: " + (self.folder / "redis.log").read_text())
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # SHUTDOWN: flushes the append-only file
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def restart(self, down_s: float = 0.5) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


class Worker:
    """One `quantcompare worker` process, started the way docs/scaling.md starts it."""

    def __init__(self, env: dict, log_dir: Path, name: str, workers: int = 1, cwd: Path | None = None):
        self.env = dict(env)
        self.name = name
        self.log_path = log_dir / f"worker-{name}.log"
        self.workers = workers
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> "Worker":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(QUANTCOMPARE), "worker", "--workers", str(self.workers),
                                      "--name", f"{self.name}@%h"], env=self.env, cwd=self.cwd,
                                     stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while " ready." not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {self.name} did not start: {self.log()[-3000:]}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pool_pids(self) -> list[int]:
        """The pool's job processes (spawned children, not the resource tracker)."""
        return [c.pid for c in psutil.Process(self.proc.pid).children()
                if "resource_tracker" not in " ".join(c.cmdline())]

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Cluster:
    """API server(s) + workers over one data directory and one Redis database."""

    def __init__(self, root: Path, redis_url: str, *, fault_jobs: bool = True, cwd: Path | None = None, **settings):
        self.root = root
        self.data_dir = root / "var"
        settings = {"executor": "celery", "broker_url": redis_url, **settings}
        self.settings = settings
        self.fault_jobs = fault_jobs
        self.cwd = cwd
        self.apis: list[LiveServer] = []
        self.workers: list[Worker] = []

    def add_api(self) -> LiveServer:
        kw = {"cwd": self.cwd} if self.cwd else {}
        s = LiveServer(self.data_dir, fault_jobs=self.fault_jobs, **kw, **self.settings).start()
        self.apis.append(s)
        return s

    @property
    def api(self) -> LiveServer:
        return self.apis[0]

    def add_worker(self, workers: int = 1) -> Worker:
        env = self.apis[0].env if self.apis else None
        assert env is not None, "start an API first (its environment is the workers')"
        w = Worker(env, self.root, f"w{len(self.workers)}-{self.apis[0].port}", workers=workers, cwd=self.cwd).start()
        self.workers.append(w)
        return w

    def worker_running(self, job_id: str, timeout: float = 30.0) -> Worker:
        """The worker whose pool process runs this job (it writes its pid to ran.txt)."""
        ran = self.data_dir / "jobs" / job_id / "ran.txt"
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid = int(ran.read_text())
                parent = psutil.Process(pid).ppid()
                for w in self.workers:
                    if w.alive and w.proc.pid == parent:
                        return w
            except (OSError, ValueError, psutil.Error):
                pass
            assert time.monotonic() < deadline, f"no worker is running job {job_id}"
            time.sleep(0.05)

    def row(self, job_id: str) -> dict:
        """The job's row in the store, read directly (attempts is not in the HTTP envelope)."""
        with sqlite3.connect(self.data_dir / "quantcompare.sqlite3", timeout=30) as c:
            c.row_factory = sqlite3.Row
            return dict(c.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone())

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        for s in self.apis:
            s.stop()
