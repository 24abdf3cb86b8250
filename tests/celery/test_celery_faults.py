"""The Celery executor under faults: lost workers, a broker restart, a broker that is down, two
API processes at once, a worker told to stop. Real Redis, real `quantcompare worker` processes;
jobs are tests/jobs/fault_jobs commands (they exercise the job system, not the toolchain)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from cluster import API_SETTINGS, Cluster, RedisServer
from test_http_api import assert_problem, upload

from service.jobs.celery.store import SharedJobStore
from service.jobs.spec import JobSpec


def wait_row(cluster: Cluster, job_id: str, pred, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while not pred(row := cluster.row(job_id)):
        assert time.monotonic() < deadline, f"job {job_id} stuck at {row['status']} (attempt {row['attempts']})"
        time.sleep(0.05)
    return row


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def cluster(tmp_path, redis_server):
    c = Cluster(tmp_path, redis_server.new_db_url(), **API_SETTINGS)
    c.add_api()
    yield c
    c.stop()


def test_a_job_whose_worker_is_lost_runs_again_exactly_once(cluster):
    cluster.add_worker()
    cluster.add_worker()
    with cluster.api.client() as c:
        job = upload(c, "sleep 3").json()
    holder = cluster.worker_running(job["id"])
    first_run = int((cluster.data_dir / "jobs" / job["id"] / "ran.txt").read_text())
    holder.kill()  # the whole worker: Celery consumer, supervisor and the job's process
    deadline = time.monotonic() + 5
    while not gone(first_run):
        assert time.monotonic() < deadline, "the job's process outlived its worker"
        time.sleep(0.05)
    done = cluster.api.wait_job(job["id"], timeout=40)
    assert done["status"] == "succeeded", done
    assert cluster.row(job["id"])["attempts"] == 2
    survivor = next(w for w in cluster.workers if w.alive)
    assert f"job {job['id']} runs again (attempt 2)" in survivor.log()
    # Never twice more: past another visibility timeout the job is still done, still 2 attempts.
    time.sleep(API_SETTINGS["job_timeout_s"] + API_SETTINGS["job_lost_after_s"] + 2)
    row = cluster.row(job["id"])
    assert (row["status"], row["attempts"]) == ("succeeded", 2)


def test_a_duplicate_message_for_a_running_job_waits_and_never_runs_it_twice(cluster):
    from service.config import Settings
    from service.jobs.celery.app import QUEUE, TASK_RUN_JOB, celery_app

    cluster.add_worker()
    cluster.add_worker()
    with cluster.api.client() as c:
        job = upload(c, "sleep 3").json()
    holder = cluster.worker_running(job["id"])
    settings = Settings(**{k: v for k, v in cluster.settings.items() if k != "executor"})
    celery_app(settings).send_task(TASK_RUN_JOB, args=[job["id"]], queue=QUEUE)  # as a broker might redeliver
    other = next(w for w in cluster.workers if w is not holder)
    assert cluster.api.wait_job(job["id"], timeout=30)["status"] == "succeeded"
    deadline = time.monotonic() + 20  # the duplicate looks again after the job's deadline, then skips it
    while "succeeded in" not in other.log() or "'skip'" not in other.log():
        assert time.monotonic() < deadline, other.log()[-2000:]
        time.sleep(0.1)
    assert "retry: Retry in" in other.log()
    row = cluster.row(job["id"])
    assert (row["status"], row["attempts"]) == ("succeeded", 1)


def test_a_job_that_loses_its_worker_twice_fails_as_interrupted(cluster):
    for _ in range(3):
        cluster.add_worker()
    with cluster.api.client() as c:
        job = upload(c, "sleep 4").json()
    first = cluster.worker_running(job["id"])
    first.kill()
    # the second attempt has started its first stage (status 'running' is set a moment before the
    # stage: killed in between, the detail says "before its first stage")
    # Generous: re-delivery to another of the 3 fresh workers took over 40 s once with a corpus run
    # beside the suite on 2 cores (a fresh-clone CI); the test fails only when it never comes.
    wait_row(cluster, job["id"], lambda r: r["status"] == "running" and r["attempts"] == 2 and r["stage"],
             timeout=120)
    second = cluster.worker_running(job["id"])
    assert second is not first
    second.kill()
    done = cluster.api.wait_job(job["id"], timeout=120)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "interrupted"
    assert done["error"]["detail"] == ("the worker running this job was lost 2 time(s) (killed, or its machine "
                                       "went away) during prepare; it was not run again")
    with cluster.api.client() as c:  # the last worker goes on
        assert upload(c, "ok", {"seed": 301}, wait=30).json()["status"] == "succeeded"


def test_a_worker_told_to_stop_finishes_its_job_first(cluster):
    w = cluster.add_worker()
    with cluster.api.client() as c:
        job = upload(c, "sleep 2").json()
    wait_row(cluster, job["id"], lambda r: r["status"] == "running")
    w.stop()  # SIGTERM: Celery's warm shutdown
    assert w.proc.returncode == 0
    row = cluster.row(job["id"])
    assert (row["status"], row["attempts"]) == ("succeeded", 1)


@pytest.mark.parametrize("persistent", [True, False], ids=["broker with an append-only file",
                                                           "broker that forgets everything"])
def test_a_broker_restart_mid_queue_loses_and_duplicates_nothing(tmp_path, persistent):
    redis = RedisServer(tmp_path / "redis", persistent=persistent).start()
    cluster = Cluster(tmp_path, redis.url(0), **API_SETTINGS)
    try:
        cluster.add_api()
        cluster.add_worker()
        with cluster.api.client() as c:
            ids = [upload(c, "sleep 1", {"seed": 400 + i}).json()["id"] for i in range(4)]
        wait_row(cluster, ids[0], lambda r: r["status"] == "running")
        redis.restart()
        for job_id in ids:
            assert cluster.api.wait_job(job_id, timeout=40)["status"] == "succeeded", cluster.workers[0].log()[-3000:]
        assert [cluster.row(j)["attempts"] for j in ids] == [1, 1, 1, 1]
        if not persistent:  # the queued messages were gone: the API's reconciler published them again
            assert "republished" in cluster.api.log()
        with cluster.api.client() as c:  # and the pair goes on as before
            assert upload(c, "ok", {"seed": 410}, wait=30).json()["status"] == "succeeded"
    finally:
        cluster.stop()
        redis.stop()


def test_a_submission_while_the_broker_is_down_gets_503_and_leaves_nothing(tmp_path):
    redis = RedisServer(tmp_path / "redis").start()
    cluster = Cluster(tmp_path, redis.url(0), **API_SETTINGS)
    try:
        api = cluster.add_api()
        cluster.add_worker()
        redis.stop()
        with api.client() as c:
            t = time.monotonic()
            r = upload(c, "ok", {"seed": 500})
            assert time.monotonic() - t < 15
            body = assert_problem(r, 503, "busy")
            assert "broker" in body["detail"] and int(r.headers["retry-after"]) >= 1
            assert list((cluster.data_dir / "jobs").iterdir()) == []
            assert list((cluster.data_dir / "tmp").iterdir()) == []
            redis.start()
            assert upload(c, "ok", {"seed": 500}, wait=30).json()["status"] == "succeeded"
    finally:
        cluster.stop()
        redis.stop()


def test_two_api_processes_submit_at_once_and_see_the_same_jobs(cluster):
    second = cluster.add_api()
    cluster.add_worker()
    cluster.add_worker()
    apis = cluster.apis

    def submit(i: int) -> dict:
        with apis[i % 2].client() as c:
            return upload(c, "ok", {"seed": 600 + i}, wait=30).json()

    with ThreadPoolExecutor(8) as ex:
        jobs = list(ex.map(submit, range(12)))
    assert len({j["id"] for j in jobs}) == 12
    assert all(j["status"] == "succeeded" for j in jobs), [j["error"] for j in jobs]
    for i, j in enumerate(jobs):  # each API reads what the other accepted
        with apis[(i + 1) % 2].client() as c:
            assert c.get(j["links"]["self"]).json()["report"]["id"] == j["id"]
    assert all(cluster.row(j["id"])["attempts"] == 1 for j in jobs)
    with second.client() as c:  # a result one API stored is the other's cache hit
        again = upload(c, "ok", {"seed": 600}, wait=30).json()
    assert again["cached"] is True and again["id"] == jobs[0]["id"]


# -- the claim: what a delivery of a job id does, by the job's state -------------------------
def _problem(rec) -> dict:
    return {"code": "interrupted", "detail": f"lost {rec.attempts}"}


@pytest.mark.parametrize(
    "case, status, started_ago, attempts, action, after",
    [
        ("a queued job runs", "queued", None, 0, "run", ("running", 1)),
        ("a running job inside its deadline waits for its worker", "running", 3.0, 1, "wait", ("running", 1)),
        ("a running job past its deadline runs again", "running", 100.0, 1, "run", ("running", 2)),
        ("a running job past its deadline with no attempts left fails", "running", 100.0, 2, "failed", ("failed", 2)),
        ("a finished job is a duplicate delivery", "succeeded", 100.0, 1, "skip", ("succeeded", 1)),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_the_claim_decides_what_a_delivery_does(connect, case, status, started_ago, attempts, action, after):
    store = SharedJobStore(connect())  # on SQLite and on PostgreSQL
    spec = JobSpec(id="a" * 32)
    store.create(spec, cache_key=None)
    now = time.time()
    store.db.write("UPDATE jobs SET status=?, attempts=?, started_at=? WHERE id=?",
                   (status, attempts, None if started_ago is None else now - started_ago, spec.id))
    c = store.claim(spec.id, job_timeout_s=5, lost_after_s=2, max_attempts=2, fail_problem=_problem, now=now)
    assert c.action == action
    rec = store.get(spec.id)
    assert (rec.status, rec.attempts) == after
    if action == "wait":
        assert c.wait_s == pytest.approx(4.0)
    if action == "failed":
        assert rec.error == {"code": "interrupted", "detail": "lost 2"}
    assert store.claim("b" * 32, job_timeout_s=5, lost_after_s=2, max_attempts=2, fail_problem=_problem).action == "skip"
    store.close()


def test_settings_name_the_executor_and_the_broker():
    from service.config import Settings

    s = Settings.from_env({"QUANTCOMPARE_EXECUTOR": "celery", "QUANTCOMPARE_BROKER_URL": "redis://r:6379/0"})
    assert (s.executor, s.broker_url) == ("celery", "redis://r:6379/0")
    with pytest.raises(ValueError, match="QUANTCOMPARE_EXECUTOR"):
        Settings.from_env({"QUANTCOMPARE_EXECUTOR": "dask"})
    from service.jobs.celery.app import celery_app

    conf = celery_app(s).conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost and conf.worker_prefetch_multiplier == 1
    assert conf.broker_transport_options["visibility_timeout"] == s.job_timeout_s + s.job_lost_after_s
    assert json.loads(json.dumps(conf.accept_content)) == ["json"]
