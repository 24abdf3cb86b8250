"""The store's guarantees hold on both databases when every caller has its own connection, as the
API and each worker process do: a job is claimed once, identical submissions make one job, the
queue limit holds, and a job interrupted ``max_attempts`` times fails as ``interrupted``. The
schema is made by migrations that run once, whoever starts first."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from service.jobs.celery.store import SharedJobStore
from service.jobs.db.migrations import MIGRATIONS, SchemaTooNew
from service.jobs.db.sqlite import SqliteDatabase
from service.jobs.pool import interrupted_problem
from service.jobs.spec import JobSpec
from service.jobs.store import JobStore
from service.jobs.submission import new_job_id

CALLERS = 6


def _spec() -> JobSpec:
    return JobSpec(id=new_job_id(), model_file="input/model.onnx")


def _together(fn, n: int = CALLERS) -> list:
    """``fn(i)`` on n threads released at once, each with its own connection."""
    start = threading.Barrier(n)

    def go(i):
        start.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


def test_jobs_claimed_from_several_connections_run_once_each(connect):
    first = JobStore(connect())
    ids = [_spec().id for _ in range(30)]
    for job_id in ids:
        assert first.create(JobSpec(id=job_id), cache_key=None)
    stores = [JobStore(connect()) for _ in range(CALLERS)]

    def claim_all(i):
        got = []
        while (rec := stores[i].claim_next()) is not None:
            got.append(rec.id)
        return got

    claimed = [job_id for got in _together(claim_all) for job_id in got]
    assert sorted(claimed) == sorted(ids)  # every job once: none lost, none twice
    assert {(r.status, r.attempts) for r in map(first.get, ids)} == {("running", 1)}


def test_identical_submissions_from_several_connections_make_one_job(connect):
    stores = [JobStore(connect()) for _ in range(CALLERS)]
    answers = _together(lambda i: stores[i].create_or_join(_spec(), cache_key="same", max_queue=50))
    assert len(set(answers)) == 1
    assert stores[0].counts()["queued"] == 1


def test_the_queue_limit_holds_across_connections(connect):
    stores = [JobStore(connect()) for _ in range(CALLERS)]
    answers = _together(lambda i: stores[i].create_or_join(_spec(), cache_key=f"key{i}", max_queue=4))
    assert sum(a is not None for a in answers) == 4
    assert stores[0].counts()["queued"] == 4


def test_a_delivery_claimed_from_two_connections_at_once_runs_once(connect):
    first = SharedJobStore(connect())
    spec = _spec()
    first.create(spec, cache_key=None)
    stores = [SharedJobStore(connect()) for _ in range(CALLERS)]
    actions = _together(lambda i: stores[i].claim(spec.id, job_timeout_s=60, lost_after_s=60, max_attempts=2,
                                                  fail_problem=interrupted_problem).action)
    assert sorted(actions) == ["run"] + ["wait"] * (CALLERS - 1)
    assert first.get(spec.id).attempts == 1


def test_a_job_interrupted_max_attempts_times_fails_as_interrupted(connect):
    store = JobStore(connect())
    spec = _spec()
    store.create(spec, cache_key=None)
    for attempt in (1, 2):
        rec = store.claim_next()
        assert (rec.id, rec.attempts) == (spec.id, attempt)
        store.set_progress(spec.id, "quantize", 1, 3)
        requeued, failed = JobStore(connect()).recover(max_attempts=2, fail_problem=interrupted_problem)  # a restart
        assert (requeued, failed) == (([spec.id], []) if attempt == 1 else ([], [spec.id]))
    rec = store.get(spec.id)
    assert rec.status == "failed" and rec.error["code"] == "interrupted" and rec.attempts == 2
    assert "2 time(s)" in rec.error["detail"] and rec.error["stage"] == "quantize"


def test_migrations_run_once_whoever_starts_first(connect):
    dbs = _together(lambda i: connect())  # every process opening the store at once
    rows = dbs[0].query("SELECT version FROM schema_migrations ORDER BY version")
    assert [r[0] for r in rows] == [v for v, _, _ in MIGRATIONS]
    store = JobStore(dbs[1])
    spec = _spec()
    store.create(spec, cache_key="k")
    assert JobStore(connect()).get(spec.id).cache_key == "k"  # opening again keeps the rows


def test_a_store_migrated_by_a_newer_version_is_refused(connect):
    db = connect()
    db.write("INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)", (999, "future", 0.0))
    with pytest.raises(SchemaTooNew, match="schema version 999"):
        connect()


def test_a_sqlite_file_from_before_migrations_keeps_its_jobs(tmp_path):
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as c:  # the schema as the store wrote it before migrations existed
        c.executescript("""
            CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL, spec TEXT NOT NULL, cache_key TEXT,
                created_at REAL NOT NULL, started_at REAL, finished_at REAL, stage TEXT,
                done INTEGER NOT NULL DEFAULT 0, total INTEGER NOT NULL DEFAULT 0, error TEXT,
                attempts INTEGER NOT NULL DEFAULT 0);
            CREATE INDEX jobs_status ON jobs(status, created_at);
        """)
        c.execute("INSERT INTO jobs(id, status, spec, created_at) VALUES ('a', 'queued', ?, 1.0)",
                  (JobSpec(id="a").to_json(),))
    store = JobStore(SqliteDatabase(path))
    assert store.get("a").status == "queued" and store.claim_next().id == "a"
    store.close()


def test_a_postgres_connection_the_server_dropped_is_replaced_without_failing_the_call(postgres):
    import psycopg

    from service.jobs.db.postgres import PostgresDatabase

    store = JobStore(PostgresDatabase(postgres.new_database_url()))
    spec = _spec()
    store.create(spec, cache_key=None)

    def drop():  # as a server restart or a failover does to an idle connection
        with psycopg.connect(postgres.url(), autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name='quantcompare'")

    drop()
    assert store.get(spec.id).status == "queued"  # a read
    drop()
    assert store.claim_next().id == spec.id  # a transaction: it starts again on a new connection, once
    drop()
    assert store.finish(spec.id, "succeeded") and store.get(spec.id).attempts == 1
    store.close()
