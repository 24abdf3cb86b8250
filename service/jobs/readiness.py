"""What /readyz asks: does each dependency of this API answer now?

``/healthz`` is liveness only (an orchestrator restarts a process that fails it, and restarting the
API does not bring a database back). ``/readyz`` is for a load balancer: it names each dependency
that is down, so traffic goes elsewhere (or waits) until it is back:

    database  the job store: the SQLite file, or PostgreSQL (QUANTCOMPARE_DATABASE_URL)
    broker    Redis (QUANTCOMPARE_BROKER_URL), with the celery executor only
    store     the job files: the data directory, or the bucket (QUANTCOMPARE_STORAGE_URL)

Each probe runs on a thread of its own and gets ``PROBE_TIMEOUT_S``: one that has not answered by
then counts as down, so the route answers within that time whatever hangs.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable

log = logging.getLogger("quantcompare.readiness")

PROBE_TIMEOUT_S = 2.0
_probes = ThreadPoolExecutor(max_workers=6, thread_name_prefix="quantcompare-readyz")
_redis_lock = threading.Lock()


def _database(executor) -> None:
    executor.store.db.query("SELECT 1")


def _broker(executor) -> None:
    import redis

    with _redis_lock:  # one client per executor, made on first use
        client = getattr(executor, "_readiness_redis", None)
        if client is None:
            client = redis.Redis.from_url(executor.settings.broker_url, socket_timeout=PROBE_TIMEOUT_S,
                                          socket_connect_timeout=PROBE_TIMEOUT_S)
            executor._readiness_redis = client
    client.ping()


def _store(executor) -> None:
    executor.files.probe(PROBE_TIMEOUT_S)


def probes(executor) -> dict[str, Callable[[], None]]:
    out = {"database": lambda: _database(executor)}
    if getattr(executor.settings, "executor", "local") == "celery":
        out["broker"] = lambda: _broker(executor)
    out["store"] = lambda: _store(executor)
    return out


def dependencies_down(executor) -> dict[str, str]:
    """Name -> "down" for each dependency that failed or did not answer within PROBE_TIMEOUT_S.
    Why is logged, not returned: the route answers without a token, and reasons name hosts."""
    futures = {name: _probes.submit(fn) for name, fn in probes(executor).items()}
    wait(futures.values(), timeout=PROBE_TIMEOUT_S + 0.5)
    down = {}
    for name, future in futures.items():
        if not future.done():
            log.warning("readiness: %s did not answer within %.1f s", name, PROBE_TIMEOUT_S)
            down[name] = "down"
        elif future.exception() is not None:
            log.warning("readiness: %s is down: %s", name, future.exception())
            down[name] = "down"
    return down


def dependency_names(executor) -> list[str]:
    return list(probes(executor))
