"""Submitting a comparison: the cache key, reuse of an identical earlier result, joining an
identical job still in flight, or a new job.

The HTTP handler parses and validates; what makes two submissions "the same job" is decided here,
next to the executor, so every front end (HTTP today) reuses results by the same rule.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

from service.config import Settings
from service.jobs.executor import Executor
from service.jobs.spec import JobSpec
from service.jobs.store import JobRecord
from service.schemas.report import SCHEMA_VERSION


def new_job_id() -> str:
    return uuid.uuid4().hex


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def cache_key(*, model: str, calibration: str | None, options: dict, versions: dict[str, str], extra: dict | None = None) -> str:
    """Same model bytes (or example) + calibration + resolved options + toolchain -> same key."""
    return hashlib.sha256(canonical_json({
        "model": model, "calibration": calibration, "options": options, "versions": versions, "extra": extra or {},
    }).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Submitted:
    record: JobRecord
    cached: bool  # an identical earlier job's result, not a new job
    joined: bool = False  # an identical job still queued or running, answered with its id


def submit_or_reuse(executor: Executor, settings: Settings, *, model_key: str, calibration_key: str | None,
                    options: dict, versions: dict[str, str], staged: Path | None, spec_fields: dict[str, Any],
                    report_loads: Callable[[str], bool]) -> Submitted:
    """A stored result for the same inputs when one still loads (``report_loads(job_id)``), else the
    identical job still queued or running (joined), else a new job that takes ownership of
    ``staged``. On reuse or join ``staged`` is removed."""
    limits = settings.run_limits().to_json()  # in the key: a lower budget must not hit an old result
    key = cache_key(model=model_key, calibration=calibration_key, options=options, versions=versions,
                    extra={"schema_version": SCHEMA_VERSION, **limits})
    for rec in executor.cached(key):
        if report_loads(rec.id):
            executor.metrics.cache_hits.inc()
            if staged is not None:
                shutil.rmtree(staged, ignore_errors=True)
            return Submitted(rec, cached=True)
    spec = JobSpec(id=new_job_id(), options=options, limits=limits, **spec_fields)
    rec = executor.submit(spec, staged, cache_key=key)
    return Submitted(rec, cached=False, joined=rec.id != spec.id)
