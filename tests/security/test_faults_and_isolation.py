"""Faults the service must survive, and what a job can see of the server.

tests/jobs and tests/api already cover a worker that segfaults, hits its memory limit
(RLIMIT_AS and the RSS watchdog), hangs past the wall clock (its process group killed), a restart
with jobs queued and running, and 429/503 with Retry-After. The gaps filled here: a client that
disconnects mid-upload, every accepted job completing under overload, and a worker environment
that holds no secret. Jobs are ``security_jobs:run`` (no toolchain): one server for the module.
"""

from __future__ import annotations

import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from live_server import LiveServer

from tests_paths import SECURITY_TESTS

TOKEN = "tok-" + "9" * 24
OTHER_SECRET = "aws-secret-" + "7" * 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    s = LiveServer(root / "var", job_function="security_jobs:run", workers=2, max_queue=3, max_concurrent_uploads=2,
                   worker_memory_mb=3000, api_token=TOKEN, retention_hours=0)
    s.env["PYTHONPATH"] = os.pathsep.join([str(SECURITY_TESTS), s.env.get("PYTHONPATH", "")])
    s.env["AWS_SECRET_ACCESS_KEY"] = OTHER_SECRET  # something else the operator's shell holds
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def submit(client, content: bytes | None = None):
    content = content or os.urandom(16)  # unique bytes: never a cached result
    return client.post("/v1/comparisons", files={"model": ("m.onnx", content, "application/octet-stream")})


def test_a_job_sees_no_secret_and_runs_isolated(server, client):
    r = submit(client)
    assert r.status_code == 202, r.text
    job = server.wait_job(r.json()["id"], 30, headers={"Authorization": f"Bearer {TOKEN}"})
    assert job["status"] == "succeeded", job
    seen = json.loads((server.data_dir / "jobs" / job["id"] / "seen.json").read_text())
    # the reads really happened: an empty read would pass every "not in" below
    assert "PATH" in seen["environ"] and "PATH=" in seen["proc_environ"], seen
    for text in (json.dumps(seen["environ"]), seen["proc_environ"]):  # /proc/self/environ: the environment at exec
        assert TOKEN not in text and OTHER_SECRET not in text and "QUANTCOMPARE_" not in text
    assert set(seen["environ"]) <= {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
                                    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"}
    assert seen["cwd"] == str((server.data_dir / "jobs" / job["id"]).resolve())
    assert seen["rlimit_as"] == 3000 * 1024 * 1024  # the memory limit is on
    assert seen["pgid_is_pid"]  # its own process group: the wall-clock kill takes everything it started


def _half_upload(port: int, body_bytes: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    head = (b"POST /v1/comparisons HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
            b"Content-Type: multipart/form-data; boundary=bnd\r\nContent-Length: 10000000\r\n\r\n"
            b'--bnd\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n')
    s.sendall(head + b"o" * body_bytes)
    time.sleep(0.2)
    s.close()  # half a body, then gone


def test_a_client_that_disconnects_mid_upload_leaves_nothing(server, client):
    proc = psutil.Process(server.proc.pid)
    _half_upload(server.port, 1000)  # warm the path (lazy imports open files once)
    time.sleep(0.5)
    jobs_before = {p.name for p in (server.data_dir / "jobs").iterdir()}
    fds_before = proc.num_fds()
    for size in (0, 10, 64 * 1024, 2 * 1024 * 1024):
        _half_upload(server.port, size)
    deadline = time.monotonic() + 10
    while any((server.data_dir / "tmp").iterdir()) or proc.num_fds() > fds_before:
        assert time.monotonic() < deadline, (list((server.data_dir / "tmp").iterdir()), proc.num_fds(), fds_before)
        time.sleep(0.1)
    assert {p.name for p in (server.data_dir / "jobs").iterdir()} == jobs_before, "a half upload became a job"
    assert client.get("/healthz").status_code == 200
    assert submit(client).status_code == 202


def test_under_overload_refusals_say_when_to_retry_and_every_accepted_job_completes(server, client):
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: submit(client, b"sleep " + os.urandom(16)), range(24)))
    accepted = [r.json()["id"] for r in responses if r.status_code in (200, 202)]
    refused = [r for r in responses if r.status_code not in (200, 202)]
    assert accepted and refused, [r.status_code for r in responses]
    for r in refused:
        assert r.status_code in (429, 503), r.text
        assert r.json()["code"] == "busy" and int(r.headers["retry-after"]) >= 1
    for job_id in accepted:
        job = server.wait_job(job_id, 60, headers={"Authorization": f"Bearer {TOKEN}"})
        assert job["status"] == "succeeded", job
