"""A deployment over several "machines" that share no directory, all on loopback: a real PostgreSQL
for the job store, a real S3-compatible server (SeaweedFS) for the files, Redis for the queue, the
API, and two `quantcompare worker` processes, each with its own scratch directory.

It runs real comparisons (a tiny ONNX upload with light options: a job is a fraction of a second
to a few seconds) and checks what a team running it relies on: artifacts download byte-identical to
the report's digests, the level graphs made again on download, the page and the result cache; a
burst of 60 submissions over the two workers, with the API killed and started again in the middle,
loses no job and runs none twice; a worker killed mid-job loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.deploy.deployment import (BURST, FULLER, JOB_TIMEOUT_S, LIGHT, LOST_AFTER_S, MODEL, Deployment, finished,
                                     submit)
from tests.deploy.servers import postgres, s3  # noqa: F401  (session fixtures)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, postgres, s3):  # noqa: F811
    d = Deployment(tmp_path_factory.mktemp("deploy"), postgres, s3)
    yield d
    d.stop()


def test_files_live_in_the_bucket_and_download_as_the_report_says(deployment):
    r = submit(deployment.api, FULLER, wait=120)
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "succeeded", job["error"]
    report, base = job["report"], job["links"]["artifacts"]
    with deployment.api.client(timeout=120) as c:
        listing = {a["name"]: a for a in c.get(base).json()["artifacts"]}
        for artifact in ("pt2e_qdq", "ort_qdq"):
            file = report["artifacts"][artifact]["file"]
            got = c.get(listing[file["path"]]["url"])
            assert got.status_code == 200
            assert hashlib.sha256(got.content).hexdigest() == file["sha256"] and len(got.content) == file["size"]
        assert c.get(f"{base}/fp32.onnx").content == MODEL  # the upload is the fp32 artifact ...
        level = c.get(f"{base}/ort_qdq.all.onnx")  # made again on download, checked against the job's digests
        assert level.status_code == 200, level.text
        assert len(level.content) == listing["ort_qdq.all.onnx"]["size"] == \
            report["artifacts"]["ort_qdq"]["optimized"]["all"]["download_bytes"]
        page = c.get(job["links"]["report_html"])
        assert page.status_code == 200 and "tiny" in page.text and "ort_qdq.onnx" in page.text
        again = c.post("/v1/comparisons", files={"model": ("tiny.onnx", MODEL)}, data={"options": json.dumps(FULLER)})
        assert again.status_code == 200 and again.json()["cached"] is True and again.json()["id"] == job["id"]
    keys = deployment.s3.keys(deployment.bucket, f"qc/jobs/{job['id']}/")
    assert f"qc/jobs/{job['id']}/artifacts/fp32.onnx" not in keys  # ... stored once, under input/
    assert f"qc/jobs/{job['id']}/input/model.onnx" in keys and f"qc/jobs/{job['id']}/report.json.gz" in keys
    # No directory is shared: the API keeps no job folder, and each worker's scratch is gone once the job is stored.
    assert list((deployment.api.data_dir / "jobs").iterdir()) == []
    for i in range(2):
        assert list((deployment.root / f"worker{i}" / "jobs").iterdir()) == []


def test_a_burst_over_two_workers_loses_no_job_and_runs_none_twice_even_if_the_api_dies(deployment):
    answered: dict[int, str] = {}
    lock = threading.Lock()
    restarted = threading.Event()

    def one(seed: int) -> None:
        r = submit(deployment.api, {**LIGHT, "seed": 100 + seed})
        assert r.status_code in (200, 202), r.text
        with lock:
            answered[seed] = r.json()["id"]
            if len(answered) == BURST // 2 and not restarted.is_set():
                restarted.set()
                deployment.api.stop(signal.SIGKILL)  # mid-burst: other submissions are in flight right now
                deployment.api.start()

    t0 = time.monotonic()
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(one, range(BURST)))
    assert restarted.is_set() and len(answered) == BURST
    ids = set(answered.values())
    assert len(ids) == BURST  # distinct options: distinct jobs
    jobs = {job_id: finished(deployment.api, job_id, timeout=300) for job_id in ids}
    assert {j["status"] for j in jobs.values()} == {"succeeded"}, [j["error"] for j in jobs.values() if j["error"]]
    print(f"burst of {BURST}: {time.monotonic() - t0:.1f} s from the first submission to the last job done")
    rows = deployment.rows()
    assert {rows[i]["attempts"] for i in ids} == {1}  # claimed once each
    assert not [i for i, row in rows.items() if row["status"] not in ("succeeded", "failed")]  # nothing left behind
    runs = {i: deployment.runs(i) for i in ids}
    assert all(len(r) == 1 for r in runs.values()), {i: r for i, r in runs.items() if len(r) != 1}
    assert {r[0] for r in runs.values()} == {"w0", "w1"}  # both workers took part


def test_a_worker_killed_mid_job_loses_nothing(deployment):
    r = submit(deployment.api, {**FULLER, "seed": 7})
    job_id = r.json()["id"]
    deadline = time.monotonic() + 60
    while not deployment.runs(job_id):
        assert time.monotonic() < deadline, "no worker took the job"
        time.sleep(0.02)
    (holder,) = [w for w in deployment.workers if w.name in deployment.runs(job_id)]
    assert deployment.rows()[job_id]["status"] == "running"
    holder.kill()  # the whole worker: Celery consumer, supervisor and the job's process
    job = finished(deployment.api, job_id, timeout=JOB_TIMEOUT_S + LOST_AFTER_S + 90)
    assert job["status"] == "succeeded", job["error"]
    assert deployment.rows()[job_id]["attempts"] == 2
    survivor = next(w for w in deployment.workers if w is not holder)
    assert f"job {job_id} runs again (attempt 2)" in survivor.log()
    with deployment.api.client(timeout=60) as c:
        for artifact in ("pt2e_qdq", "ort_qdq"):
            file = job["report"]["artifacts"][artifact]["file"]
            got = c.get(f"{job['links']['artifacts']}/{file['path']}").content
            assert hashlib.sha256(got).hexdigest() == file["sha256"]
