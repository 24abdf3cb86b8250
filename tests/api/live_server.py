"""A real ``quantcompare serve`` on a free loopback port, in its own process (shared by the
api, e2e and bench code). Started the way docs/scaling.md starts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
JOBS_TESTS = REPO / "tests" / "jobs"
QUANTCOMPARE = Path(sys.executable).parent / "quantcompare"


class LiveServer:
    def __init__(self, data_dir: Path, *, fault_jobs: bool = True, cwd: Path = REPO, **settings):
        self.data_dir = data_dir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUANTCOMPARE_")}
        env["QUANTCOMPARE_DATA_DIR"] = str(data_dir)
        if fault_jobs:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(JOBS_TESTS), env.get("PYTHONPATH")]))
            settings = {"job_function": "fault_jobs:run", "worker_preload": "", **settings}
        for k, v in settings.items():
            env[f"QUANTCOMPARE_{k.upper()}"] = str(v)
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / f"server-{self.port}.log"

    def start(self, timeout: float = 60.0) -> "LiveServer":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(QUANTCOMPARE), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                                     env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log()[-3000:]}")
            try:
                if httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not start: {self.log()[-3000:]}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def worker_pids(self) -> list[int]:
        import psutil

        return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)
                if "multiprocessing" in " ".join(c.cmdline()) and "resource_tracker" not in " ".join(c.cmdline())]

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=kw.pop("timeout", 60), **kw)

    def wait_job(self, job_id: str, timeout: float = 60.0, headers=None) -> dict:
        deadline = time.monotonic() + timeout
        with self.client(headers=headers) as c:
            while True:
                job = c.get(f"/v1/comparisons/{job_id}", params={"wait": 2}).json()
                if job["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
                    return job
