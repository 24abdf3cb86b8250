"""The job index: a row per job with its state, progress and cache key.

The job's files live in its own folder or bucket prefix (see ``service.jobs.spec`` and
``jobs/storage/``). The rows live in a database (``service/jobs/db/``): one SQLite file under the
data directory by default, PostgreSQL when ``QUANTCOMPARE_DATABASE_URL`` names one. Every query
is here, written once for both; each database makes a transaction the only writer, so the claim,
the join and the queue limit hold however many processes and machines share the store.

State machine: ``queued -> running -> succeeded | failed``; ``running -> queued`` only when the
service stops or restarts under a job (counted in ``attempts``). A cancelled job (``cancel``) has no
state: its row is deleted, and the worker running it notices the row is gone (``present``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from service.jobs.db.sqlite import SqliteDatabase
from service.jobs.spec import JobSpec

STATES = ("queued", "running", "succeeded", "failed")


@dataclass(frozen=True)
class JobRecord:
    id: str
    status: str
    spec: JobSpec
    cache_key: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    stage: str | None
    done: int
    total: int
    error: dict[str, Any] | None
    attempts: int

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "failed")


def _record(row) -> JobRecord:
    return JobRecord(
        id=row["id"], status=row["status"], spec=JobSpec.from_json(row["spec"]), cache_key=row["cache_key"],
        created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
        stage=row["stage"], done=row["done"], total=row["total"],
        error=json.loads(row["error"]) if row["error"] else None, attempts=row["attempts"],
    )


def _join(c, cache_key: str) -> str | None:
    """Inside a transaction: the oldest queued or running job with this key, one joiner more."""
    row = c.execute("SELECT id FROM jobs WHERE cache_key=? AND status IN ('queued', 'running') "
                    "ORDER BY created_at LIMIT 1", (cache_key,)).fetchone()
    if row is None:
        return None
    c.execute("UPDATE jobs SET joiners=joiners+1 WHERE id=?", (row["id"],))
    return row["id"]


class JobStore:
    """The store's operations over one database (a path: the SQLite file there)."""

    def __init__(self, db: "Path | Any"):
        self.db = SqliteDatabase(db) if isinstance(db, (str, Path)) else db

    def describe(self) -> str:
        return self.db.describe()

    def close(self) -> None:
        self.db.close()

    def _tx(self, fn):
        return self.db.transaction(fn)

    # -- writes ---------------------------------------------------------------------------
    def create(self, spec: JobSpec, *, cache_key: str | None, max_queue: int | None = None) -> bool:
        """Insert a queued job; False (nothing inserted) when the queue already holds ``max_queue``."""

        def tx(c):
            if max_queue is not None:
                (n,) = c.execute("SELECT COUNT(*) FROM jobs WHERE status='queued'").fetchone()
                if n >= max_queue:
                    return False
            c.execute(
                "INSERT INTO jobs(id, status, spec, cache_key, created_at) VALUES (?, 'queued', ?, ?, ?)",
                (spec.id, spec.to_json(), cache_key, time.time()),
            )
            return True

        return self._tx(tx)

    def create_or_join(self, spec: JobSpec, *, cache_key: str | None, max_queue: int | None = None) -> str | None:
        """The id that answers this submission, decided in one transaction: a queued or running
        job with the same ``cache_key`` (joined: nothing inserted, no queue slot taken), else
        ``spec.id`` once inserted; None when the queue already holds ``max_queue``."""

        def tx(c):
            if cache_key is not None:
                joined = _join(c, cache_key)
                if joined is not None:
                    return joined
            if max_queue is not None:
                (n,) = c.execute("SELECT COUNT(*) FROM jobs WHERE status='queued'").fetchone()
                if n >= max_queue:
                    return None
            c.execute(
                "INSERT INTO jobs(id, status, spec, cache_key, created_at) VALUES (?, 'queued', ?, ?, ?)",
                (spec.id, spec.to_json(), cache_key, time.time()),
            )
            return spec.id

        return self._tx(tx)

    def join_in_flight(self, cache_key: str) -> JobRecord | None:
        """The queued or running job with this key, now counting one more joiner; None when there is none."""

        def tx(c):
            job_id = _join(c, cache_key)
            return _record(c.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()) if job_id else None

        return self._tx(tx)

    def cancel(self, job_id: str) -> tuple[str, JobRecord | None]:
        """One submitter cancels: ``("kept", rec)`` while other joiners still wait on the queued or
        running job (one joiner fewer), ``("deleted", rec)`` once the row is gone, ``("missing", None)``."""

        def tx(c):
            row = c.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                return "missing", None
            rec = _record(row)
            if not rec.finished and row["joiners"] > 1:
                c.execute("UPDATE jobs SET joiners=joiners-1 WHERE id=?", (job_id,))
                return "kept", rec
            c.execute("DELETE FROM jobs WHERE id=?", (job_id,))
            return "deleted", rec

        return self._tx(tx)

    def claim_next(self) -> JobRecord | None:
        """Oldest queued job -> running, atomically (safe with several claimers)."""

        def tx(c):
            row = c.execute("SELECT * FROM jobs WHERE status='queued' ORDER BY created_at, rowid LIMIT 1").fetchone()
            if row is None:
                return None
            c.execute(
                "UPDATE jobs SET status='running', started_at=?, attempts=attempts+1, stage=NULL, done=0, total=0 "
                "WHERE id=?",
                (time.time(), row["id"]),
            )
            return _record(c.execute("SELECT * FROM jobs WHERE id=?", (row["id"],)).fetchone())

        return self._tx(tx)

    def set_progress(self, job_id: str, stage: str, done: int, total: int) -> None:
        self.db.write("UPDATE jobs SET stage=?, done=?, total=? WHERE id=? AND status='running'",
                      (stage, int(done), int(total), job_id))

    def finish(self, job_id: str, status: str, error: dict[str, Any] | None = None) -> bool:
        assert status in ("succeeded", "failed")
        return self.db.write("UPDATE jobs SET status=?, error=?, finished_at=? WHERE id=? AND status='running'",
                             (status, json.dumps(error) if error else None, time.time(), job_id)) == 1

    def requeue(self, job_id: str, *, count_attempt: bool) -> None:
        """Put a running job back in the queue (the service is stopping under it)."""
        self.db.write("UPDATE jobs SET status='queued', started_at=NULL, stage=NULL, done=0, total=0, "
                      "attempts=attempts - ? WHERE id=? AND status='running'", (0 if count_attempt else 1, job_id))

    def recover(self, *, max_attempts: int, fail_problem) -> tuple[list[str], list[str]]:
        """After a restart: running jobs are re-queued, or failed once they used their attempts.

        ``fail_problem(record)`` builds the error for a job that will not be run again.
        """

        def tx(c):
            requeued, failed = [], []
            for row in c.execute("SELECT * FROM jobs WHERE status='running'").fetchall():
                rec = _record(row)
                if rec.attempts < max_attempts:
                    c.execute("UPDATE jobs SET status='queued', started_at=NULL, stage=NULL, done=0, total=0 "
                              "WHERE id=?", (rec.id,))
                    requeued.append(rec.id)
                else:
                    c.execute("UPDATE jobs SET status='failed', error=?, finished_at=? WHERE id=?",
                              (json.dumps(fail_problem(rec)), time.time(), rec.id))
                    failed.append(rec.id)
            return requeued, failed

        return self._tx(tx)

    def delete(self, job_id: str) -> None:
        self.db.write("DELETE FROM jobs WHERE id=?", (job_id,))

    # -- reads ----------------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        rows = self.db.query("SELECT * FROM jobs WHERE id=?", (job_id,))
        return _record(rows[0]) if rows else None

    def present(self, ids: list[str]) -> set[str]:
        """Which of these jobs still have a row (a running job without one was cancelled)."""
        if not ids:
            return set()
        marks = ", ".join("?" * len(ids))
        return {r[0] for r in self.db.query(f"SELECT id FROM jobs WHERE id IN ({marks})", tuple(ids))}

    def joiners(self, job_id: str) -> int:
        rows = self.db.query("SELECT joiners FROM jobs WHERE id=?", (job_id,))
        return rows[0][0] if rows else 0

    def in_flight(self, cache_key: str) -> JobRecord | None:
        """The oldest queued or running job with this key (the one ``create_or_join`` would join)."""
        rows = self.db.query("SELECT * FROM jobs WHERE cache_key=? AND status IN ('queued', 'running') "
                             "ORDER BY created_at LIMIT 1", (cache_key,))
        return _record(rows[0]) if rows else None

    def find_succeeded(self, cache_key: str) -> Iterator[JobRecord]:
        rows = self.db.query("SELECT * FROM jobs WHERE cache_key=? AND status='succeeded' "
                             "ORDER BY finished_at DESC LIMIT 5", (cache_key,))
        return (_record(r) for r in rows)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        out.update({s: n for s, n in self.db.query("SELECT status, COUNT(*) FROM jobs GROUP BY status")})
        return out

    def ids(self) -> set[str]:
        return {r[0] for r in self.db.query("SELECT id FROM jobs")}

    def finished_before(self, cutoff: float) -> list[str]:
        rows = self.db.query("SELECT id FROM jobs WHERE status IN ('succeeded','failed') AND finished_at < ?", (cutoff,))
        return [r[0] for r in rows]

    def statuses(self) -> dict[str, tuple[str, float | None]]:
        """id -> (status, finished_at) of every job (the data-dir budget's view of the store)."""
        return {r[0]: (r[1], r[2]) for r in self.db.query("SELECT id, status, finished_at FROM jobs")}

    def mean_duration(self, last: int = 20) -> float | None:
        (row,) = self.db.query("SELECT AVG(finished_at - started_at) FROM (SELECT finished_at, started_at FROM jobs "
                               "WHERE status='succeeded' AND started_at IS NOT NULL ORDER BY finished_at DESC LIMIT ?) "
                               "AS recent", (last,))
        return row[0]
