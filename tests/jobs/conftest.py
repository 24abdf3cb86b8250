"""The job store under test on both of its databases: the SQLite file and a real PostgreSQL."""

from __future__ import annotations

import pytest

from service.jobs.store import JobStore
from tests.deploy.servers import connect, postgres, s3  # noqa: F401  (fixtures)


@pytest.fixture
def store(connect):
    return JobStore(connect())
