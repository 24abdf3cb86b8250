"""HTTP envelopes around the report: the job, problems, listings.

The report itself is ``service.schemas.report.Report``; these models wrap it. Field names are
pinned in docs/CONTRACTS.md (the client reads them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.report import CpuInfo, Report

JobStatus = Literal["queued", "running", "succeeded", "failed"]
PROBLEM_MEDIA_TYPE = "application/problem+json"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Problem(_Model):
    """RFC 9457 problem details, plus our stable ``code`` (clients switch on it)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: str = Field(description="URI naming the problem type: urn:quantcompare:problem:<code>")
    title: str
    status: int
    detail: str = Field(description="what happened, in words a person can act on")
    code: str = Field(description="stable machine-readable code, e.g. invalid_model, busy, worker_died")
    hint: str | None = None


def problem(code: str, title: str, status: int, detail: str, hint: str | None = None, **extra: Any) -> dict[str, Any]:
    """A problem as a JSON-ready dict (used by the HTTP layer and stored with failed jobs)."""
    out: dict[str, Any] = {"type": f"urn:quantcompare:problem:{code}", "title": title, "status": status,
                           "detail": detail, "code": code}
    if hint:
        out["hint"] = hint
    out.update({k: v for k, v in extra.items() if k not in out})
    return out


def problem_from_error(e) -> dict[str, Any]:
    """Problem dict for a ``QuantCompareError`` (its ``details`` never hold server paths)."""
    return problem(e.code, e.title, e.status, e.message, e.hint, **getattr(e, "details", {}))


class Progress(_Model):
    stage: str | None = Field(None, description="prepare, fp32, quantize, inspect, optimize, evaluate, latency, advice, decide")
    done: int = 0
    total: int = 0


class JobLinks(_Model):
    self: str
    report_html: str
    artifacts: str


class Job(_Model):
    """The job envelope: POST /v1/comparisons and GET /v1/comparisons/{id}."""

    id: str
    status: JobStatus
    cached: bool = Field(False, description="true when an identical earlier job's result was returned")
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    progress: Progress
    error: Problem | None = None
    report: Report | None = None
    links: JobLinks


class ArtifactEntry(_Model):
    name: str = Field(description="file name, e.g. ort_qdq.onnx or ort_qdq.all.onnx")
    artifact: str = Field(description="fp32, pt2e_qdq, ort_qdq, ort_qoperator")
    level: str | None = Field(None, description="optimization level of an optimized graph; null for the file as written")
    size: int
    url: str


class ArtifactList(_Model):
    artifacts: list[ArtifactEntry]


class ExampleInputInfo(_Model):
    name: str
    dtype: str
    shape: list[int | str]


class ExampleInfo(_Model):
    name: str
    description: str
    inputs: list[ExampleInputInfo]


class ExampleList(_Model):
    examples: list[ExampleInfo]


class Versions(_Model):
    versions: dict[str, str]
    python: str
    cpu: CpuInfo


class Health(_Model):
    status: Literal["ok"] = "ok"


class ComparisonBody(_Model):
    """JSON body of POST /v1/comparisons (the multipart form is the other way in)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    example: str = Field(description="a built-in example, see GET /v1/examples")
    options: dict[str, Any] = Field(default_factory=dict, description="ComparisonOptions")
