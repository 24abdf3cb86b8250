"""Fixtures for the Celery executor: one Redis per session, clusters of API + workers on it.

``server`` and ``client`` have the same shape as tests/api's, so the API tests run here too
(test_api_on_celery.py imports them); ``real_server``/``conv_relu_job``/``fast`` likewise for
tests/e2e's (test_e2e_on_celery.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for sub in ("api", "e2e", "jobs"):
    if str(HERE.parent / sub) not in sys.path:
        sys.path.insert(0, str(HERE.parent / sub))

from cluster import API_SETTINGS, Cluster, RedisServer, require_redis_server  # noqa: E402
from tests.deploy.servers import connect, postgres  # noqa: E402,F401  (fixtures: the claim on both databases)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    require_redis_server()
    r = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory, redis_server):
    """tests/api's server on the Celery executor: an API process and two workers of one process each."""
    c = Cluster(tmp_path_factory.mktemp("celery_api"), redis_server.new_db_url(), **API_SETTINGS)
    s = c.add_api()
    c.add_worker()
    c.add_worker()
    s.cluster = c
    yield s
    c.stop()


@pytest.fixture
def client(server):
    with server.client() as c:
        yield c


FAST = {"calibration_samples": 4, "eval_samples": 2, "latency": {"enabled": False}}


@pytest.fixture(scope="session")
def fast() -> dict:
    return FAST


@pytest.fixture(scope="session")
def real_server(tmp_path_factory, redis_server):
    """The real toolchain on the Celery executor: one API process, one worker with one warm process."""
    root = tmp_path_factory.mktemp("celery_e2e")
    c = Cluster(root, redis_server.new_db_url(), fault_jobs=False, cwd=root, workers=1)
    s = c.add_api()
    c.add_worker()
    s.cluster = c
    yield s
    c.stop()


@pytest.fixture(scope="session")
def conv_relu_job(real_server):
    with real_server.client(timeout=400) as c:
        r = c.post("/v1/comparisons", params={"wait": 300}, json={"example": "conv_relu", "options": FAST})
    assert r.status_code == 200, r.text
    return r.json()
