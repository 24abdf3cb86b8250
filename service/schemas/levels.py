"""Report sections about what ONNX Runtime makes of each file (levels, diffs, numerics, latency,
decisions, lints). Owned by the levels stage (``service.pipeline.levels`` and friends).

Placeholder shapes; the levels work fills them in.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class OptimizedLevel(_Model):
    level: str
    op_histogram: dict[str, int] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)


class AgreementRow(_Model):
    a: str
    b: str


class DecisionRow(_Model):
    decision: str
    where: dict[str, str] = Field(default_factory=dict)


class Lint(_Model):
    code: str
    message: str
