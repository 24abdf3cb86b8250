"""DELETE /v1/comparisons/{id} on the local pool, through a real server: a job cancelled in any stage
has its worker process (and what it started) stopped, its files, pins and disk budget freed, and
the next job runs. Jobs are tests/jobs/fault_jobs commands that wait in a named stage: what is
under test is the job system stopping them, whichever stage they are in (the Celery twin is
tests/celery/test_celery_cancel.py; a real toolchain job is cancelled in test_a_real_comparison...)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.processes import gone

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import LiveServer  # noqa: E402
from test_http_api import assert_problem, upload  # noqa: E402

from service.pipeline.stages import STEPS  # noqa: E402

STAGES = tuple(s.name for s in STEPS)

TOKEN = "cancel-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def in_stage(c, job_id: str, stage: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = c.get(f"/v1/comparisons/{job_id}").json()
        if job["status"] == "running" and (job.get("progress") or {}).get("stage") == stage:
            return job
        assert time.monotonic() < deadline and job["status"] in ("queued", "running"), job
        time.sleep(0.05)


def job_pid(data_dir: Path, job_id: str, timeout: float = 10.0) -> int:
    ran = data_dir / "jobs" / job_id / "ran.txt"
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(ran.read_text())
        except (OSError, ValueError):
            assert time.monotonic() < deadline, f"job {job_id} never started"
            time.sleep(0.05)


def nonce() -> str:
    return uuid.uuid4().hex  # each upload its own bytes: no cache hit, no join


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = LiveServer(tmp_path_factory.mktemp("cancel") / "var", workers=2, job_timeout_s=120, max_queue=50,
                   api_token=TOKEN).start()
    yield s
    s.stop()


@pytest.fixture
def c(server):
    with server.client(headers=AUTH) as client:
        yield client


@pytest.mark.parametrize("stage", STAGES)
def test_a_job_cancelled_during_a_stage_stops_its_worker_and_leaves_nothing(server, c, stage):
    job = upload(c, f"sleep 120 {stage} {nonce()}").json()
    in_stage(c, job["id"], stage)
    pid = job_pid(server.data_dir, job["id"])
    r = c.delete(f"/v1/comparisons/{job['id']}")
    assert r.status_code == 204, r.text
    assert gone(pid), f"the worker running the job in {stage} is still alive"
    assert not (server.data_dir / "jobs" / job["id"]).exists()
    assert_problem(c.get(f"/v1/comparisons/{job['id']}"), 404, "not_found")


def test_what_a_cancelled_job_started_is_stopped_with_it(server, c):
    job = upload(c, f"grandchild {nonce()}").json()
    in_stage(c, job["id"], "evaluate")
    folder = server.data_dir / "jobs" / job["id"]
    deadline = time.monotonic() + 10
    while not (folder / "grandchild.pid").is_file():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    helper = int((folder / "grandchild.pid").read_text())
    assert c.delete(f"/v1/comparisons/{job['id']}").status_code == 204
    assert gone(helper), "a process the job started outlived its cancellation"


def test_a_queued_job_cancelled_never_runs(server, c):
    busy = [upload(c, f"sleep 120 prepare {nonce()}").json()["id"] for _ in range(2)]
    queued = upload(c, f"ok 0 {nonce()}").json()
    assert c.get(f"/v1/comparisons/{queued['id']}").json()["status"] == "queued"
    assert c.delete(f"/v1/comparisons/{queued['id']}").status_code == 204
    for job_id in busy:
        assert c.delete(f"/v1/comparisons/{job_id}").status_code == 204
    after = upload(c, f"ok 0 {nonce()}").json()
    done = server.wait_job(after["id"], headers=AUTH)
    assert done["status"] == "succeeded", done.get("error")
    assert not (server.data_dir / "jobs" / queued["id"]).exists()


def test_a_joined_job_runs_until_its_last_submitter_cancels(server, c):
    command = f"sleep 120 quantize {nonce()}"
    first, second = upload(c, command).json(), upload(c, command).json()
    assert first["id"] == second["id"]  # identical in flight: one job
    in_stage(c, first["id"], "quantize")
    pid = job_pid(server.data_dir, first["id"])
    kept = c.delete(f"/v1/comparisons/{first['id']}")
    assert kept.status_code == 202 and kept.json()["status"] == "running", kept.text
    time.sleep(1.0)  # two cancel checks of the pool: it must not have stopped the job
    assert psutil.pid_exists(pid) and c.get(f"/v1/comparisons/{first['id']}").json()["status"] == "running"
    assert c.delete(f"/v1/comparisons/{first['id']}").status_code == 204
    assert gone(pid)


def test_only_a_caller_with_the_token_cancels(server, c):
    job = upload(c, f"sleep 120 prepare {nonce()}").json()
    with server.client() as anonymous:
        assert_problem(anonymous.delete(f"/v1/comparisons/{job['id']}"), 401, "unauthorized")
    with server.client(headers={"Authorization": "Bearer wrong"}) as wrong:
        assert_problem(wrong.delete(f"/v1/comparisons/{job['id']}"), 401, "unauthorized")
    assert c.get(f"/v1/comparisons/{job['id']}").json()["status"] in ("queued", "running")
    assert c.delete(f"/v1/comparisons/{job['id']}").status_code == 204
    assert_problem(c.delete(f"/v1/comparisons/{job['id']}"), 404, "not_found")


def test_a_finished_job_is_deleted_with_its_files(server, c):
    job = upload(c, f"ok 0 {nonce()}").json()
    assert server.wait_job(job["id"], headers=AUTH)["status"] == "succeeded"
    assert (server.data_dir / "jobs" / job["id"]).is_dir()
    assert c.delete(f"/v1/comparisons/{job['id']}").status_code == 204
    assert not (server.data_dir / "jobs" / job["id"]).exists()
    assert_problem(c.get(f"/v1/comparisons/{job['id']}/artifacts"), 404, "not_found")


def test_cancelling_frees_the_disk_budget_and_the_next_job_runs(tmp_path):
    # A budget with room for one job's reservation (64 MiB) only: while one runs, the next is refused.
    s = LiveServer(tmp_path / "var", workers=1, job_timeout_s=120, max_data_gb=0.1).start()
    try:
        with s.client() as c:
            running = upload(c, f"sleep 120 optimize {nonce()}").json()
            in_stage(c, running["id"], "optimize")
            assert_problem(upload(c, f"ok 0 {nonce()}"), 503, "data_dir_full")
            assert c.delete(f"/v1/comparisons/{running['id']}").status_code == 204
            after = upload(c, f"ok 0 {nonce()}")
            assert after.status_code == 202, after.text
            done = s.wait_job(after.json()["id"])
            assert done["status"] == "succeeded", done.get("error")
    finally:
        s.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "a cancelled CI run's SIGTERM"])
def test_the_cli_cancels_its_job_when_interrupted(server, tmp_path, sig):
    model = tmp_path / "net.onnx"
    model.write_text(f"sleep 120 quantize {nonce()}")
    known = set((server.data_dir / "jobs").iterdir())
    cli = subprocess.Popen([str(Path(sys.executable).parent / "quantcompare-client"), "check", str(model), "--server",
                            server.base_url, "--token", TOKEN, "--quiet", "--out", str(tmp_path / "report.json")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (new := set((server.data_dir / "jobs").iterdir()) - known):
        assert time.monotonic() < deadline and cli.poll() is None, cli.stderr.read() if cli.poll() is not None else ""
        time.sleep(0.05)
    (folder,) = new
    with server.client(headers=AUTH) as c:
        in_stage(c, folder.name, "quantize")
        pid = job_pid(server.data_dir, folder.name)
        cli.send_signal(sig)
        _, err = cli.communicate(timeout=30)
        assert cli.returncode == 130, err
        assert f"job {folder.name} cancelled" in err
        assert_problem(c.get(f"/v1/comparisons/{folder.name}"), 404, "not_found")
    assert gone(pid)
