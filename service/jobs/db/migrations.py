"""The store's schema, created and upgraded at start-up by numbered migrations, idempotently.

Every process that opens the store (the API, each worker) runs ``migrate``: in one transaction
holding the database's write lock it applies, in order, each migration not yet recorded in
``schema_migrations``, so processes starting at once apply each one exactly once between them.
Migration 1's statements are ``IF NOT EXISTS``: a SQLite file made before migrations existed
gets it recorded and keeps its rows. A database that a newer quantcompare migrated further than
this one knows is refused at start-up: this code would misread it.

A new migration is appended, never edited: (version, name, {dialect: [statements]}).
"""

from __future__ import annotations

import time
from typing import Any

_JOBS = """CREATE TABLE IF NOT EXISTS jobs (
    {rowid}id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    cache_key TEXT,
    created_at {real} NOT NULL,
    started_at {real},
    finished_at {real},
    stage TEXT,
    done INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0
)"""
_INDEXES = ["CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, created_at)",
            "CREATE INDEX IF NOT EXISTS jobs_cache ON jobs(cache_key, status)"]

MIGRATIONS: list[tuple[int, str, dict[str, list[str]]]] = [
    (1, "jobs table", {
        "sqlite": [_JOBS.format(rowid="", real="REAL"), *_INDEXES],
        # SQLite orders ties by its implicit rowid; PostgreSQL gets a column of that name, so the
        # store's queries are one text for both.
        "postgresql": [_JOBS.format(rowid="rowid BIGSERIAL NOT NULL,\n    ", real="DOUBLE PRECISION"), *_INDEXES],
    }),
    # How many submissions wait on a queued or running job (the first, plus each identical one that
    # joined it): DELETE cancels the job only when the last of them cancels.
    (2, "jobs.joiners", {
        "sqlite": ["ALTER TABLE jobs ADD COLUMN joiners INTEGER NOT NULL DEFAULT 1"],
        "postgresql": ["ALTER TABLE jobs ADD COLUMN IF NOT EXISTS joiners INTEGER NOT NULL DEFAULT 1"],
    }),
]

_REAL = {"sqlite": "REAL", "postgresql": "DOUBLE PRECISION"}


class SchemaTooNew(RuntimeError):
    pass


def migrate(db: Any) -> list[int]:
    """Apply the migrations ``db`` lacks; returns the versions applied now."""

    def tx(c) -> list[int]:
        c.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                  f"applied_at {_REAL[db.dialect]} NOT NULL)")
        done = {row[0] for row in c.execute("SELECT version FROM schema_migrations").fetchall()}
        known = {version for version, _, _ in MIGRATIONS}
        if done - known:
            raise SchemaTooNew(f"the job store ({db.describe()}) has schema version {max(done)}, newer than this "
                               f"quantcompare knows ({max(known)}): run the same quantcompare version everywhere")
        applied = []
        for version, name, statements in MIGRATIONS:
            if version in done:
                continue
            for sql in statements[db.dialect]:
                c.execute(sql)
            c.execute("INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                      (version, name, time.time()))
            applied.append(version)
        return applied

    return db.transaction(tx)
