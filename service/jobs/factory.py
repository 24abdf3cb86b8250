"""What the settings select: the executor ``QUANTCOMPARE_EXECUTOR`` names (the local pool, or Celery
workers via a broker), and the start-up check of the store and storage every process relies on."""

from __future__ import annotations

from service.config import ConfigurationError, Settings
from service.jobs.db import open_database
from service.jobs.executor import Executor, LocalExecutor
from service.jobs.storage import open_files


def make_executor(settings: Settings) -> Executor:
    if settings.executor == "celery":
        # celery and redis are imported only by a service configured for them.
        from service.jobs.celery.executor import CeleryExecutor

        return CeleryExecutor(settings)
    return LocalExecutor(settings)


def check_deployment(settings: Settings) -> list[str]:
    """Before serving or taking jobs: the store opens (its migrations run) and the storage answers a
    write, or ``ConfigurationError`` says in one line what is wrong (an unreachable database, a missing
    bucket, refused credentials). Returns what was checked, for the start-up log."""
    setting = "QUANTCOMPARE_DATABASE_URL" if settings.database_url else "QUANTCOMPARE_DATA_DIR"
    try:
        db = open_database(settings)
    except Exception as e:  # noqa: BLE001 - whatever the driver raises, the operator gets one line
        raise ConfigurationError(f"{setting}: {str(e).strip() or type(e).__name__}") from None
    checked = [db.describe()]
    db.close()
    setting = "QUANTCOMPARE_STORAGE_URL" if settings.storage_url else "QUANTCOMPARE_DATA_DIR"
    try:
        files = open_files(settings)
        files.check()
    except ConfigurationError:
        raise
    except Exception as e:  # noqa: BLE001
        raise ConfigurationError(f"{setting}: {str(e).strip() or type(e).__name__}") from None
    return checked + [files.describe()]
