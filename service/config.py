"""Service settings, read once from ``QUANTCOMPARE_*`` environment variables.

Every field below is ``QUANTCOMPARE_<FIELD NAME IN CAPITALS>``; docs/settings.md
lists them (a test keeps the two in step). ``get_settings()`` is cached; tests build a
``Settings(...)`` of their own and hand it to ``create_app(settings)`` or override the
dependency, rather than patching the environment mid-run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from service.errors import validation_errors
from service.pipeline.inputs.safety.budgets import Budgets  # framework-free (a dataclass of limits)

ENV_PREFIX = "QUANTCOMPARE_"
BUDGET_PREFIX = ENV_PREFIX + "BUDGET_"


class ConfigurationError(RuntimeError):
    """A setting names something that is not there or will not let us in (a database, a bucket):
    found at start-up, reported as one line, and the process exits (never a job failing later)."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Where the SQLite index, uploads in flight and one folder per job live.
    data_dir: Path = Field(Path("./var"), description="SQLite index, tmp uploads and one folder per job")
    # Local worker processes; each imports torch/onnx/onnxruntime once and stays warm.
    workers: int = Field(2, ge=1, le=64, description="worker processes (= jobs running at once)")
    # The most cores one job's untimed work may use (issue 47): a job uses the cores no other running job
    # uses (the machine's ledger, pipeline/cores.py), up to this; latency is still timed alone on one thread.
    job_cores: int | None = Field(None, ge=1, le=1024, description="upper bound on one job's cores for its untimed work (unset = no bound: a job gets the cores no other running job on the machine uses)")
    # The machine's cores ledger: one folder per machine, shared by every worker process on it.
    cores_ledger: Path | None = Field(None, description="folder of this machine's cores ledger, shared by its workers (unset = a folder in the machine's temp dir); never a shared volume")
    # Jobs waiting for a worker; past this a submission gets 503 + Retry-After.
    max_queue: int = Field(32, ge=0, le=100_000, description="queued jobs before 503")
    # Uploads being received at once; past this a submission gets 429 + Retry-After.
    max_concurrent_uploads: int = Field(8, ge=1, le=1024, description="uploads in flight before 429")
    # 30 min: a real-size model takes ~1200 fp32 inference-times with the defaults (docs/history/results.md),
    # so at ~1 s an inference a job runs ~20 min on one idle core; 15 min killed such jobs.
    job_timeout_s: float = Field(1800.0, gt=0, description="wall-clock limit per job; the worker's process group is killed past it")
    # Address-space limit (RLIMIT_AS) of each worker, and the RSS at which the supervisor kills it.
    worker_memory_mb: int = Field(6144, ge=0, description="per-worker memory limit in MiB (0 = none)")
    # A worker is replaced after this many jobs, so native leaks and fragmentation stay bounded.
    worker_max_jobs: int = Field(50, ge=1, description="jobs per worker before it is recycled")
    # Modules every worker imports before it says it is ready ("warm" workers).
    worker_preload: str = Field("torch,torchao,onnx,onnxruntime,service.pipeline.compare,service.jobs.warmup",
                                description="comma-separated modules each worker imports at start; a module's warm_up() runs too")
    # "module:function" run for each job inside a worker (tests inject their own).
    job_function: str = Field("service.jobs.runner:run_comparison_job", description="module:function a worker runs per job")
    max_upload_mb: float = Field(512.0, gt=0, description="largest model upload in MiB (413 past it)")
    # An upload holds one of max_concurrent_uploads slots while it streams: a client that stalls, or
    # trickles a byte now and then, would hold it for ever and turn every other upload away (429).
    upload_idle_timeout_s: float = Field(60.0, gt=0, description="an upload sending nothing this long is dropped (408)")
    upload_min_kib_s: float = Field(16.0, ge=0, description="after upload_idle_timeout_s, an upload averaging less than this (KiB/s) is dropped (408; 0 = no minimum)")
    # uvicorn closes an idle keep-alive connection only after a response: one that opens and sends
    # nothing, or half its headers, was held for ever (service/api/edge.py).
    header_timeout_s: float = Field(15.0, gt=0, description="a request line and headers not all received this long after the connection opened (or its last response) get 408 and the connection is closed")
    max_calibration_mb: float = Field(256.0, gt=0, description="largest calibration .npz in MiB (413 past it)")
    # A level graph a job kept as digests is made again per download, in a process holding a session as
    # large as the job's (service/jobs/storage/level_downloads.py).
    level_graph_slots: int = Field(2, ge=1, le=64, description="level graphs made again for downloads at once")
    level_graph_queue: int = Field(8, ge=0, le=10_000, description="level-graph downloads waiting for a slot before 429")
    max_wait_s: float = Field(600.0, ge=0, description="largest ?wait= a request may ask for")
    # A job that was running when the service stopped is run again once; a second interruption fails it.
    max_attempts: int = Field(2, ge=1, le=10, description="runs of a job across service restarts")
    retention_hours: float = Field(168.0, ge=0, description="finished jobs older than this are deleted (0 = keep)")
    max_data_gb: float = Field(0.0, ge=0, description="disk budget of the data dir in GB: finished jobs are evicted oldest first, a job that cannot fit gets 503 (0 = no budget)")
    allow_pt2: bool = Field(True, description="accept .pt2 uploads (they need the static archive check)")
    api_token: str | None = Field(None, description="if set, every route but /healthz needs 'Authorization: Bearer <token>' (/openapi.json and /docs included)")
    executor: Literal["local", "celery"] = Field(
        "local", description="job executor; 'local' = the embedded process pool, 'celery' = `quantcompare worker` processes via the broker")
    # Celery executor only (docs/scaling.md); the API and every worker share it.
    broker_url: str | None = Field(None, description="Redis URL of the Celery broker, e.g. redis://redis:6379/0 (executor=celery, `quantcompare worker`)")
    job_lost_after_s: float = Field(60.0, gt=0, description="a job still running this long past its time limit lost its worker and runs again (celery)")
    # Several machines without a shared directory (docs/scaling.md): the store in PostgreSQL, the files in a bucket.
    database_url: str | None = Field(None, description="postgresql://user:password@host:5432/db: the job store in PostgreSQL, for the API and workers on several machines (unset = a SQLite file in the data dir)")
    storage_url: str | None = Field(None, description="s3://bucket/prefix: uploads, reports and artifacts in an S3-compatible bucket, workers keep only local scratch (unset = job folders in the data dir); endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...")
    storage_downloads: Literal["stream", "redirect"] = Field("stream", description="with storage_url: artifact downloads stream through the API, or redirect to a presigned URL of the bucket (clients must reach its endpoint)")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")
    # Either way every control character a request or a model put in a message is escaped (service/log_format.py).
    log_format: Literal["text", "json"] = Field("text", description="'text': one line per event; 'json': one JSON object per line (for a log shipper)")
    # Static budgets checked before the heavy calls (service.pipeline.inputs.safety.Budgets). Set one with
    # QUANTCOMPARE_BUDGET_<FIELD> (e.g. QUANTCOMPARE_BUDGET_MAX_NODES=50000) or all as a JSON object here.
    budgets: Budgets = Field(default_factory=Budgets, description="budget overrides as JSON, or QUANTCOMPARE_BUDGET_<FIELD> each")

    @field_validator("api_token", "database_url", "storage_url")
    @classmethod
    def _empty_is_none(cls, v):
        return v or None

    @field_validator("database_url")
    @classmethod
    def _postgresql_url(cls, v):
        if v is not None and not v.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql://user:password@host:port/database URL")
        return v

    @field_validator("storage_url")
    @classmethod
    def _s3_url(cls, v):
        parts = urlsplit(v) if v is not None else None
        if parts is not None and (parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment):
            raise ValueError("must be an s3://bucket/prefix URL")
        return v

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        values = {}
        for name in cls.model_fields:
            key = ENV_PREFIX + name.upper()
            if key in env:
                values[name] = env[key]
        values = _with_budget_overrides(env, values)
        unknown = sorted(k for k in env if k.startswith(ENV_PREFIX) and k[len(ENV_PREFIX):].lower() not in cls.model_fields
                         and not k.startswith(BUDGET_PREFIX))
        if unknown:
            # A misspelt setting silently ignored is a limit silently not applied: say so loudly.
            logging.getLogger("quantcompare").warning("ignoring unknown setting(s): %s", ", ".join(unknown))
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            msgs = "; ".join(f"{ENV_PREFIX}{x['loc'].split('.')[0].upper()}: {x['msg']}" for x in validation_errors(e, skip=()))
            raise ValueError(f"invalid settings: {msgs}") from None

    # Derived paths: one place decides the layout of the data directory.
    @property
    def db_path(self) -> Path:
        return self.data_dir / "quantcompare.sqlite3"

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "jobs"

    @property
    def tmp_dir(self) -> Path:
        return self.data_dir / "tmp"

    @property
    def cores_per_job(self) -> tuple[int | None, str | None]:
        """The upper bound on one job's cores, and where it comes from (said in the report when it binds)."""
        return (self.job_cores, "QUANTCOMPARE_JOB_CORES") if self.job_cores is not None else (None, None)

    @property
    def preload_modules(self) -> list[str]:
        return [m.strip() for m in self.worker_preload.split(",") if m.strip()]


def _with_budget_overrides(env, values: dict) -> dict:
    """QUANTCOMPARE_BUDGETS (JSON object) and QUANTCOMPARE_BUDGET_<FIELD> into ``values["budgets"]``.

    An unknown budget name is an error, not a warning: a misspelt limit would silently not apply.
    """
    fields = {f.name for f in dataclasses.fields(Budgets)}
    overrides: dict = {}
    raw = values.pop("budgets", None)
    if raw:
        try:
            overrides = dict(json.loads(raw))
        except (ValueError, TypeError):
            raise ValueError(f"invalid settings: {ENV_PREFIX}BUDGETS must be a JSON object") from None
    for key, value in env.items():
        if key.startswith(BUDGET_PREFIX):
            overrides[key[len(BUDGET_PREFIX):].lower()] = value
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"invalid settings: unknown budget(s) {', '.join(unknown)}; the budgets are: "
                         + ", ".join(sorted(fields)))
    if overrides:
        values["budgets"] = overrides
    return values


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings.from_env()
