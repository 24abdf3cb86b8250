"""The job store's databases: one SQLite file (one machine) or PostgreSQL (several machines).

Both offer the same three calls to ``service.jobs.store.JobStore``, which holds every query:
``transaction(fn)`` (one writer at a time, whatever the number of processes and machines),
``write(sql, params)`` (one statement, same lock) and ``query(sql, params)`` (a read). SQL is
written once, with ``?`` placeholders; rows read by position or by column name. Each creates or
upgrades its schema when opened (``migrations.py``).
"""

from __future__ import annotations

from service.config import Settings
from service.jobs.db.postgres import PostgresDatabase
from service.jobs.db.sqlite import SqliteDatabase


def open_database(settings: Settings):
    """``QUANTCOMPARE_DATABASE_URL`` unset: the SQLite file in the data directory; postgresql://...: that server."""
    return PostgresDatabase(settings.database_url) if settings.database_url else SqliteDatabase(settings.db_path)
