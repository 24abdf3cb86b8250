"""DELETE /v1/comparisons/{id} with the Celery executor: the job's process runs in a `quantcompare worker`
(another process, standing for another machine), which learns of the cancellation from the store alone.
Real Redis and workers; jobs are tests/jobs/fault_jobs commands waiting in a named stage."""

from __future__ import annotations

import uuid

import pytest

from tests.processes import gone
from cluster import API_SETTINGS, Cluster
from test_http_api import assert_problem, upload


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, redis_server):
    c = Cluster(tmp_path_factory.mktemp("celery_cancel"), redis_server.new_db_url(),
                **{**API_SETTINGS, "job_timeout_s": 120})
    c.add_api()
    c.add_worker()
    yield c
    c.stop()


@pytest.mark.parametrize("stage", ["prepare", "quantize", "evaluate"])
def test_a_running_job_is_stopped_on_its_celery_worker(cluster, stage):
    with cluster.api.client() as c:
        job = upload(c, f"sleep 120 {stage} {uuid.uuid4().hex}").json()
        holder = cluster.worker_running(job["id"])
        pid = int((cluster.data_dir / "jobs" / job["id"] / "ran.txt").read_text())
        assert c.delete(f"/v1/comparisons/{job['id']}").status_code == 204
        assert gone(pid), "the job's process outlived its cancellation"
        assert holder.alive  # the worker itself stays, and takes the next job
        assert not (cluster.data_dir / "jobs" / job["id"]).exists()
        assert_problem(c.get(f"/v1/comparisons/{job['id']}"), 404, "not_found")
        after = upload(c, f"ok 0 {uuid.uuid4().hex}").json()
    done = cluster.api.wait_job(after["id"], timeout=60)
    assert done["status"] == "succeeded", done.get("error")
    assert f"job {job['id']} was cancelled during {stage}" in holder.log()


def test_a_queued_job_cancelled_is_skipped_by_the_worker(cluster):
    with cluster.api.client() as c:
        busy = upload(c, f"sleep 120 prepare {uuid.uuid4().hex}").json()
        cluster.worker_running(busy["id"])
        queued = upload(c, f"ok 0 {uuid.uuid4().hex}").json()
        assert c.delete(f"/v1/comparisons/{queued['id']}").status_code == 204
        assert c.delete(f"/v1/comparisons/{busy['id']}").status_code == 204
        after = upload(c, f"ok 0 {uuid.uuid4().hex}").json()
    assert cluster.api.wait_job(after["id"], timeout=60)["status"] == "succeeded"
    assert not (cluster.data_dir / "jobs" / queued["id"] / "ran.txt").exists()
