"""The executor ``QUANTCOMPARE_EXECUTOR`` names: the local pool, or Celery workers via a broker."""

from __future__ import annotations

from service.config import Settings
from service.jobs.executor import Executor, LocalExecutor


def make_executor(settings: Settings) -> Executor:
    if settings.executor == "celery":
        # celery and redis are imported only by a service configured for them.
        from service.jobs.celery.executor import CeleryExecutor

        return CeleryExecutor(settings)
    return LocalExecutor(settings)
