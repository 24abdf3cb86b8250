"""The corpus of hostile and broken submissions (hostile_inputs.CASES) against a real server.

One real server for the module (one warm worker with the toolchain). Most refusals happen in the
API process (sniffing and the static checks) and never reach a worker; the few only a worker can
make end as a failed job with the same stable code. After every case: /healthz answers, nothing
was left in the data dir's tmp/, the server's working directory is still empty, no payload ran,
and the body holds no server path, traceback or byte of the canary file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from hostile_inputs import BAD_NAMES, CANARY, CASES, Case, Env, conv_bytes, good_x, model_form, npz
from live_server import REPO, LiveServer

PROBLEM = "application/problem+json"
FAST = {"calibration_samples": 4, "eval_samples": 2, "latency": {"enabled": False}}
JOB_ENTRIES = {"job.json", "input", "artifacts", "report.json.gz", "model"}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus")


@pytest.fixture(scope="module")
def server(root):
    cwd = root / "cwd"  # the server's working directory: must stay empty
    cwd.mkdir()
    s = LiveServer(root / "var", fault_jobs=False, cwd=cwd, workers=1, max_upload_mb=2, max_calibration_mb=1,
                   job_timeout_s=180, max_queue=8, retention_hours=0)
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def env(root) -> Env:
    import torch

    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(CANARY.encode() * 4)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean((2, 3)))

    ep = torch.export.export(Net().eval(), (torch.randn(2, 3, 8, 8),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=16)},))
    good = root / "good.pt2"
    torch.export.save(ep, good)
    return Env(outside=outside, marker=root / "PWNED", good_pt2=good)


@pytest.fixture(scope="module")
def client(server):
    with server.client(timeout=60) as c:
        yield c


def assert_clean_body(text: str, server: LiveServer, env: Env) -> None:
    for leak in ("Traceback", str(server.data_dir), str(REPO), str(env.outside), "/tmp/", CANARY):
        assert leak not in text, f"the body leaks {leak!r}: {text[:500]}"


def assert_nothing_outside(server: LiveServer, env: Env) -> None:
    assert not env.marker.exists(), "a payload from the upload ran"
    assert list(server.cwd.iterdir()) == [], "something was written to the server's working directory"
    assert not any((server.data_dir / "tmp").iterdir()), "an upload was left in tmp/"
    assert {p.name for p in server.data_dir.iterdir() if not p.name.startswith("quantcompare.sqlite3")} <= \
        {"jobs", "tmp", "running"}  # running/: one marker per job while it runs (load figures), gone after
    assert not any((server.data_dir / "running").glob("*")) if (server.data_dir / "running").exists() else True
    for job in (server.data_dir / "jobs").iterdir():
        assert re.fullmatch(r"[0-9a-f]{32}", job.name), job.name
        assert {p.name for p in job.iterdir()} <= JOB_ENTRIES | {"scratch"}, sorted(p.name for p in job.iterdir())
    assert not list(server.data_dir.parent.rglob("escaped-by-zip.txt"))
    assert (env.outside / "secret.bin").read_bytes() == CANARY.encode() * 4
    assert sorted(p.name for p in env.outside.iterdir()) == ["secret.bin"]


def _codes(case: Case) -> tuple[str, ...]:
    return case.code if isinstance(case.code, tuple) else (case.code,)


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_submission_gets_a_stable_code_and_leaves_nothing(server, client, env, case):
    jobs_before = {p.name for p in (server.data_dir / "jobs").iterdir()}
    r = client.post("/v1/comparisons", **case.build(env))
    if case.where == "api":
        assert r.status_code == case.status, r.text[:1000]
        assert r.headers["content-type"].startswith(PROBLEM)
        body = r.json()
        assert body["code"] in _codes(case) and body["status"] == case.status and body["detail"], body
        assert {p.name for p in (server.data_dir / "jobs").iterdir()} == jobs_before, "a refused upload became a job"
        text = r.text
    else:
        assert r.status_code == 202, r.text[:1000]
        job = server.wait_job(r.json()["id"], 120)
        assert job["status"] == "failed" and job["error"]["code"] in _codes(case), job
        assert job["error"]["status"] == case.status
        text = json.dumps(job)
    assert_clean_body(text, server, env)
    for s in case.never_echoed:
        assert s not in text
    assert client.get("/healthz").json() == {"status": "ok"}
    assert_nothing_outside(server, env)


def test_a_good_upload_with_a_hostile_filename_runs_and_the_name_is_only_a_label(server, client, env):
    name = BAD_NAMES[0]
    form = model_form(conv_bytes(), name=name, options={**FAST, "artifacts": ["ort_qdq"], "levels": ["disable_all", "all"]},
                      calibration=npz(x=good_x(6)))
    r = client.post("/v1/comparisons", **form)
    assert r.status_code == 202, r.text
    job = server.wait_job(r.json()["id"], 240)
    assert job["status"] == "succeeded", job["error"]
    assert job["report"]["model"]["name"] == "passwd"
    assert name not in json.dumps(job)
    assert_nothing_outside(server, env)


def test_after_the_corpus_the_service_still_runs_a_good_job(server, client, env):
    r = client.post("/v1/comparisons", params={"wait": 240}, json={"example": "conv_relu", "options": {**FAST, "seed": 6}})
    assert r.status_code == 200, r.text[:1000]
    assert r.json()["status"] == "succeeded", r.json()["error"]
    assert r.json()["report"]["artifacts"]["ort_qdq"]["status"] == "ok"
    assert_nothing_outside(server, env)
