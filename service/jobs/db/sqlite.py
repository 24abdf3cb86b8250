"""The job store's default database: one SQLite file under the data directory (one machine).

WAL mode, so readers (the API) never wait on the writer (the supervisor), and several processes
of one machine can share the file. ``BEGIN IMMEDIATE`` makes every transaction the only writer.
SQLite's locks are not reliable on network filesystems: across machines use PostgreSQL
(``QUANTCOMPARE_DATABASE_URL``, db/postgres.py).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable

from service.jobs.db.migrations import migrate


BUSY_TIMEOUT_S = 30.0


def _wal(conn: sqlite3.Connection) -> None:
    """WAL mode, retried while another process holds the file: switching a new file's journal mode takes an
    exclusive lock, and SQLite answers "database is locked" at once instead of waiting its busy timeout
    when processes open one new store together (workers starting at once; CI saw it)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class SqliteDatabase:
    dialect = "sqlite"

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # One connection guarded by a lock: every statement is short, and this keeps the
        # API's threadpool and the supervisor thread from interleaving transactions.
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            _wal(self._conn)
            self._conn.execute("PRAGMA synchronous=NORMAL")
        migrate(self)

    def describe(self) -> str:
        return f"SQLite file {self.path}"

    def transaction(self, fn: Callable[[Any], Any]) -> Any:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return out

    def write(self, sql: str, params: tuple = ()) -> int:
        with self._lock:
            return self._conn.execute(sql, params).rowcount

    def query(self, sql: str, params: tuple = ()) -> list:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
