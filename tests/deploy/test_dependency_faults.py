"""The scale-out deployment (tests/deploy/deployment.py) while its dependencies fail under a burst:
PostgreSQL restarted, Redis restarted, the S3 server unreachable for 20 s and then back.

For each fault: every job ends ``succeeded``, or ``failed`` with the code of the dependency that
failed (and the same submission repeated then succeeds); no job runs more than its attempts;
``/healthz`` answers 200 throughout (liveness: restarting the API would not bring a database back);
``/readyz`` answers 503 naming the dependency while it is down and 200 once it is back; a download
while the store is away answers ``503 storage_unavailable`` with Retry-After. What each fault cost
is printed (docs/scaling.md quotes it).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.deploy.deployment import LIGHT, Deployment, finished, submit
from tests.deploy.servers import postgres, s3  # noqa: F401  (session fixtures)

PER_FAULT = 8  # jobs in flight when the fault starts, and as many submitted while it lasts
DOWN_S = {"database": 3.0, "broker": 3.0, "store": 20.0}
# What a job may fail with when this dependency fails under it (anything else is a bug).
FAILED_WITH = {"database": {"store_unavailable"}, "broker": set(), "store": {"storage_unavailable"}}

# ~95 s for the three (the S3 outage is 20 s, and SeaweedFS takes ~15 s more to come back): `make test`
# runs them once; `-m "not heavy"` leaves them out.
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, postgres, s3):  # noqa: F811
    d = Deployment(tmp_path_factory.mktemp("faults"), postgres, s3)
    yield d
    d.stop()


def get(api, path: str) -> httpx.Response | None:
    try:
        with api.client(timeout=10) as c:
            return c.get(path)
    except httpx.HTTPError:
        return None


class Probe:
    """/healthz and /readyz every 0.2 s while a fault lasts: what each answered, and when."""

    def __init__(self, api):
        self.api, self.health, self.ready = api, [], []
        self._stop = threading.Event()

    def _run(self):
        while not self._stop.is_set():
            t = time.monotonic()
            h, r = get(self.api, "/healthz"), get(self.api, "/readyz")
            self.health.append(h.status_code if h is not None else None)
            self.ready.append((t, r.status_code if r is not None else None, r.json() if r is not None else None))
            time.sleep(0.2)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def restart(deployment: Deployment, dependency: str, while_down) -> None:
    down = DOWN_S[dependency]
    if dependency == "database":
        deployment.postgres.restart(down, while_down=while_down)
    elif dependency == "broker":
        deployment.redis.stop()
        until = time.monotonic() + down
        while_down()
        time.sleep(max(0.0, until - time.monotonic()))
        deployment.redis.start()
    else:
        deployment.s3.restart(down, while_down=while_down)


def ready_again(api, timeout: float = 60.0) -> float:
    t0 = time.monotonic()
    while True:
        r = get(api, "/readyz")
        if r is not None and r.status_code == 200:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, f"/readyz still {r.status_code if r else 'unreachable'}: {r and r.text}"
        time.sleep(0.1)


@pytest.mark.parametrize("dependency", ["database", "broker", "store"])
def test_a_dependency_restarted_under_a_burst_loses_no_job(deployment, dependency):
    api = deployment.api
    base = {"database": 1000, "broker": 2000, "store": 3000}[dependency]
    before = submit(api, {**LIGHT, "seed": base}, wait=120)  # a finished job, to download during the fault
    assert before.json()["status"] == "succeeded", before.text
    artifact = f"{before.json()['links']['artifacts']}/ort_qdq.onnx"
    answered: dict[int, str] = {}
    seen_down: list[dict] = []

    def one(seed: int) -> None:
        r = submit(api, {**LIGHT, "seed": seed}, deadline_s=180)  # retries 503s and refused connections
        assert r.status_code in (200, 202), r.text
        answered[seed] = r.json()["id"]

    def while_down() -> None:
        deadline = time.monotonic() + 15
        while True:  # readiness names the dependency (the API may notice a moment after it went)
            r = get(api, "/readyz")
            if r is not None and r.status_code == 503 and r.json()["dependencies"][dependency] == "down":
                seen_down.append(r.json())
                assert r.headers["content-type"].startswith("application/problem+json") and r.json()["code"] == "not_ready"
                assert int(r.headers["retry-after"]) >= 1
                break
            assert time.monotonic() < deadline, f"/readyz never said {dependency} is down: {r and r.text}"
            time.sleep(0.1)
        if dependency == "store":
            d = get(api, artifact)
            assert d is not None and d.status_code == 503, d and d.text
            assert d.json()["code"] == "storage_unavailable" and int(d.headers["retry-after"]) >= 1
        # Submissions while it is down: each retries until the API takes it (joined after the fault).
        pool_futures.extend(burst.submit(one, base + PER_FAULT + 1 + i) for i in range(PER_FAULT))

    pool_futures: list = []
    t0 = time.monotonic()
    with Probe(api) as probe, ThreadPoolExecutor(2 * PER_FAULT) as burst:
        first = [burst.submit(one, base + 1 + i) for i in range(PER_FAULT)]
        for f in first:
            f.result()
        fault_started = time.monotonic()
        restart(deployment, dependency, while_down)
        back = time.monotonic()
        unready_after_s = ready_again(api)
        for f in pool_futures:
            f.result()
    jobs = {seed: finished(api, job_id, timeout=300) for seed, job_id in answered.items()}
    all_done = time.monotonic()
    assert len(jobs) == 2 * PER_FAULT
    assert set(probe.health) == {200}, probe.health  # liveness never failed
    assert seen_down and {t[1] for t in probe.ready} >= {200, 503}
    failed = {seed: j["error"]["code"] for seed, j in jobs.items() if j["status"] != "succeeded"}
    assert set(failed.values()) <= FAILED_WITH[dependency], failed
    for seed in failed:  # the same submission again: it runs and succeeds
        again = submit(api, {**LIGHT, "seed": seed}, wait=120)
        assert again.json()["status"] == "succeeded", again.text
    rows = deployment.rows()
    assert all(rows[j["id"]]["attempts"] <= 2 for j in jobs.values()), [rows[j["id"]] for j in jobs.values()]
    assert not [i for i, row in rows.items() if row["status"] not in ("succeeded", "failed")]
    print(f"\n{dependency}: down {back - fault_started:.1f} s; /readyz 503 until {unready_after_s:.1f} s after it "
          f"was back; {len(failed)} of {len(jobs)} jobs failed ({sorted(set(failed.values()))}); all jobs done "
          f"{all_done - back:.1f} s after it was back; burst {all_done - t0:.1f} s")
