"""The report's headline: one card per quantized artifact and the sentence that answers "which file".

Filled once, from the finished report, by ``service/pipeline/verdict/headline.py`` (``headline_from_report``);
the page, the CLI summary and the Python client's ``_repr_html_`` all show this object, so the rule is
applied in one place and the three agree.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class HeadlineFix(_Model):
    """The measured change advice adopted for this artifact, with its figures (before -> after)."""

    change: str  # "ort.activation_type=\"uint8\", ort.reduce_range=true"
    sqnr_db_before: float | None = None
    sqnr_db_after: float | None = None
    latency_ms_before: float | None = None
    latency_ms_after: float | None = None
    int8_coverage_before: float | None = None
    int8_coverage_after: float | None = None
    recipe: Any = None  # the advice entry's recipe, when the report has one (the quantize call that makes the file)


class HeadlineCard(_Model):
    artifact: str
    status: str  # ok | failed | skipped
    error: str | None = None  # failed/skipped: stage and message
    level: str | None = None  # the deployed level the figures are read at
    gates: str = "none"  # "passed", "failed", "none" (no gate names this artifact)
    gate_failures: list[str] = Field(default_factory=list)
    worst_sqnr_db: float | None = None
    accuracy: str | None = None  # "measured", "partly measured", "not measured"; or what judges instead of SQNR
    exact: bool = False  # worst_sqnr_db None because every error was exactly zero
    latency_ms: float | None = None
    latency_ratio: float | None = None  # median / fp32's median at the same level
    latency_noisy: bool = False
    int8_coverage: float | None = None
    float_nodes: int | None = None  # nodes ORT runs in float at the level (unfused rows)
    top_blocker: str | None = None  # the most frequent blocker code among them
    top_blocker_count: int = 0
    top_blocker_fix: str | None = None
    fix: HeadlineFix | None = None
    chosen: bool = False
    verdict: str = ""  # one line: why this file wins, or why it loses to the chosen one


class Headline(_Model):
    level: str | None  # the deployed level: "all" (ORT's default) when it ran, else the highest that ran
    cards: list[HeadlineCard] = Field(default_factory=list)  # the chosen file first, then the report's order
    choice: str | None = None  # the artifact to ship; None when none qualifies
    sentence: str  # the answer, with its figures
    rule: str  # the rule, stated as the page and docs/report.md state it
    made_up_data: str | None = None  # the one-line warning when the samples were generated
