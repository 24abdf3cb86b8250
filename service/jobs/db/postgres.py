"""The job store on PostgreSQL (``QUANTCOMPARE_DATABASE_URL=postgresql://...``): for the API and
workers on several machines, where a SQLite file on a network filesystem is not safe.

The guarantees are the SQLite file's, by the same means: every write holds one database-wide lock
(a transaction-scoped advisory lock), so a transaction here is the only writer exactly as SQLite's
``BEGIN IMMEDIATE`` makes it, and the store's queries run unchanged. The claim of a job, joining
an identical one in flight, an insert under ``max_queue``, the recovery of interrupted jobs: each
is decided alone. A write takes a few milliseconds and a job minutes, so one writer at a time is
no bottleneck at the scale of a job service.

One connection per process, guarded by a lock (as the SQLite one). A connection the server dropped
while idle (a restart, a failover) is replaced, and the call that found it dead runs once more on the
new one: a read, or a transaction that failed at its first statement (nothing of it ran).
"""

from __future__ import annotations

import threading
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

from service.errors import StoreUnavailable
from service.jobs.db.migrations import migrate

# pg_advisory_xact_lock key of the store's write lock: any fixed 64-bit number, ours alone.
WRITE_LOCK_KEY = 0x71C0_3A1E_5107_E001
CONNECT_TIMEOUT_S = 5


class DatabaseUnavailable(StoreUnavailable):
    def __init__(self, message: str):
        super().__init__(message, hint="check that the PostgreSQL server at QUANTCOMPARE_DATABASE_URL is up, "
                                       "then retry")


def redacted(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


class _Row(tuple):
    """A row read by position (``(n,) = row``) or by column name (``row["id"]``), like sqlite3.Row."""

    _index: dict[str, int]

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)


def _row_factory(cursor):
    index = {col.name: i for i, col in enumerate(cursor.description or ())}
    row_type = type("Row", (_Row,), {"_index": index})
    return lambda values: row_type(values)


class _Cursorish:
    """The connection as a transaction sees it: ``execute`` with the store's ``?`` placeholders."""

    def __init__(self, conn):
        self._conn = conn

    def execute(self, sql: str, params: tuple = ()):
        return self._conn.execute(sql.replace("?", "%s"), params)


class PostgresDatabase:
    dialect = "postgresql"

    def __init__(self, url: str):
        self.url = url
        self._lock = threading.Lock()
        self._conn = None
        import psycopg

        with self._lock:
            self._connection()
        try:
            migrate(self)
        except psycopg.Error as e:
            raise DatabaseUnavailable(f"the job store {self.describe()} could not create or upgrade its tables: "
                                      f"{str(e).strip()}") from None

    def describe(self) -> str:
        return f"PostgreSQL {redacted(self.url)}"

    def _connection(self):
        import psycopg

        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        try:
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                         row_factory=_row_factory, application_name="quantcompare")
        except psycopg.Error as e:
            self._conn = None
            raise DatabaseUnavailable(f"cannot connect to the job store {self.describe()}: "
                                      f"{str(e).strip() or type(e).__name__}") from None
        return self._conn

    def transaction(self, fn: Callable[[Any], Any]) -> Any:
        import psycopg

        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    conn.execute("BEGIN")
                    conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (WRITE_LOCK_KEY,))
                    break
                except psycopg.OperationalError as e:
                    # Dropped while idle (a restart, a failover): nothing of this transaction ran, so
                    # it starts once more on a new connection.
                    if attempt == 2 or not conn.broken:
                        raise DatabaseUnavailable(f"the job store {self.describe()} did not answer: "
                                                  f"{str(e).strip() or type(e).__name__}") from None
            try:
                out = fn(_Cursorish(conn))
            except BaseException:
                if not conn.broken:
                    conn.execute("ROLLBACK")
                raise
            # Past this point a failure is the caller's: a commit whose answer was lost must not run twice.
            conn.execute("COMMIT")
            return out

    def write(self, sql: str, params: tuple = ()) -> int:
        return self.transaction(lambda c: c.execute(sql, params).rowcount)

    def query(self, sql: str, params: tuple = ()) -> list:
        import psycopg

        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    return conn.execute(sql.replace("?", "%s"), params).fetchall()
                except psycopg.OperationalError as e:
                    if attempt == 2 or not conn.broken:  # a read is safe to repeat once on a new connection, no more
                        raise DatabaseUnavailable(f"the job store {self.describe()} did not answer: "
                                                  f"{str(e).strip() or type(e).__name__}") from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
