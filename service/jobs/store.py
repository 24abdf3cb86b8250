"""The job index: one SQLite file under the data directory.

A row per job holds its state, progress and the cache key; the job's files live in its own
folder (see ``service.jobs.spec``). WAL mode, so readers (the API) never wait on the writer
(the supervisor), and several processes can share the file.

State machine: ``queued -> running -> succeeded | failed``; ``running -> queued`` only when the
service stops or restarts under a job (counted in ``attempts``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from service.jobs.spec import JobSpec

STATES = ("queued", "running", "succeeded", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id           TEXT PRIMARY KEY,
    status       TEXT NOT NULL,
    spec         TEXT NOT NULL,
    cache_key    TEXT,
    created_at   REAL NOT NULL,
    started_at   REAL,
    finished_at  REAL,
    stage        TEXT,
    done         INTEGER NOT NULL DEFAULT 0,
    total        INTEGER NOT NULL DEFAULT 0,
    error        TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, created_at);
CREATE INDEX IF NOT EXISTS jobs_cache ON jobs(cache_key, status);
"""


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


def _record(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        id=row["id"], status=row["status"], spec=JobSpec.from_json(row["spec"]), cache_key=row["cache_key"],
        created_at=row["created_at"], started_at=row["started_at"], finished_at=row["finished_at"],
        stage=row["stage"], done=row["done"], total=row["total"],
        error=json.loads(row["error"]) if row["error"] else None, attempts=row["attempts"],
    )


class JobStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # One connection guarded by a lock: every statement is short, and this keeps the
        # API's threadpool and the supervisor thread from interleaving transactions.
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _tx(self, fn):
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return out

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
                row = c.execute("SELECT id FROM jobs WHERE cache_key=? AND status IN ('queued', 'running') "
                                "ORDER BY created_at LIMIT 1", (cache_key,)).fetchone()
                if row is not None:
                    return row["id"]
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
        with self._lock:
            self._conn.execute(
                "UPDATE jobs SET stage=?, done=?, total=? WHERE id=? AND status='running'",
                (stage, int(done), int(total), job_id),
            )

    def finish(self, job_id: str, status: str, error: dict[str, Any] | None = None) -> bool:
        assert status in ("succeeded", "failed")
        with self._lock:
            cur = self._conn.execute(
                "UPDATE jobs SET status=?, error=?, finished_at=? WHERE id=? AND status='running'",
                (status, json.dumps(error) if error else None, time.time(), job_id),
            )
            return cur.rowcount == 1

    def requeue(self, job_id: str, *, count_attempt: bool) -> None:
        """Put a running job back in the queue (the service is stopping under it)."""
        with self._lock:
            self._conn.execute(
                "UPDATE jobs SET status='queued', started_at=NULL, stage=NULL, done=0, total=0, "
                "attempts=attempts - ? WHERE id=? AND status='running'",
                (0 if count_attempt else 1, job_id),
            )

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
        with self._lock:
            self._conn.execute("DELETE FROM jobs WHERE id=?", (job_id,))

    # -- reads ----------------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return _record(row) if row else None

    def in_flight(self, cache_key: str) -> JobRecord | None:
        """The oldest queued or running job with this key (the one ``create_or_join`` would join)."""
        with self._lock:
            row = self._conn.execute("SELECT * FROM jobs WHERE cache_key=? AND status IN ('queued', 'running') "
                                     "ORDER BY created_at LIMIT 1", (cache_key,)).fetchone()
        return _record(row) if row else None

    def find_succeeded(self, cache_key: str) -> Iterator[JobRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM jobs WHERE cache_key=? AND status='succeeded' ORDER BY finished_at DESC LIMIT 5",
                (cache_key,),
            ).fetchall()
        return (_record(r) for r in rows)

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        out = dict.fromkeys(STATES, 0)
        out.update({s: n for s, n in rows})
        return out

    def ids(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._conn.execute("SELECT id FROM jobs").fetchall()}

    def finished_before(self, cutoff: float) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM jobs WHERE status IN ('succeeded','failed') AND finished_at < ?", (cutoff,)
            ).fetchall()
        return [r[0] for r in rows]

    def statuses(self) -> dict[str, tuple[str, float | None]]:
        """id -> (status, finished_at) of every job (the data-dir budget's view of the store)."""
        with self._lock:
            rows = self._conn.execute("SELECT id, status, finished_at FROM jobs").fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def mean_duration(self, last: int = 20) -> float | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT AVG(finished_at - started_at) FROM (SELECT finished_at, started_at FROM jobs "
                "WHERE status='succeeded' AND started_at IS NOT NULL ORDER BY finished_at DESC LIMIT ?)", (last,)
            ).fetchone()
        return row[0]
