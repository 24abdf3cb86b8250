from __future__ import annotations

import pytest
from live_server import LiveServer


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """Two warm workers running the fault-injection job functions (fast; no toolchain)."""
    s = LiveServer(tmp_path_factory.mktemp("api") / "var", workers=2, job_timeout_s=5, worker_memory_mb=1024,
                   max_upload_mb=64, max_calibration_mb=8, max_queue=50).start()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    with server.client() as c:
        yield c
