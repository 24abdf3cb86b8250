"""/readyz on the local executor: 200 while the job database and the jobs folder answer, 503 naming the
one that does not (here the jobs folder, gone from under the API), 200 once it is back; /healthz stays
200 throughout. The Celery + PostgreSQL + S3 twin is tests/deploy/test_dependency_faults.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import LiveServer  # noqa: E402
from test_http_api import assert_problem  # noqa: E402


def test_readyz_names_the_dependency_that_is_down_and_healthz_stays_up(tmp_path):
    s = LiveServer(tmp_path / "var", workers=1, api_token="t").start()
    try:
        with s.client() as c:  # no token: an orchestrator's probe carries none
            ready = c.get("/readyz")
            assert ready.status_code == 200 and ready.json() == {
                "status": "ready", "dependencies": {"database": "up", "store": "up"}}
            jobs = s.data_dir / "jobs"
            jobs.rename(s.data_dir / "jobs.away")
            body = assert_problem(c.get("/readyz"), 503, "not_ready")
            assert body["dependencies"] == {"database": "up", "store": "down"} and "store" in body["detail"]
            assert c.get("/healthz").status_code == 200
            (s.data_dir / "jobs.away").rename(jobs)
            assert c.get("/readyz").status_code == 200
    finally:
        s.stop()
