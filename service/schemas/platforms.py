"""The report's ``platforms``: what ORT makes of each file on a platform other than the machine that
ran the job (arm64 as emulated ORT), side by side with this machine's ``artifacts.<name>.optimized``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from service.schemas.levels import DecisionRow, OptimizedLevel, _Model

LATENCY_NOT_MEASURED = "not measured: emulated"


class PlatformRules(_Model):
    """The two rules of ORT's graph optimizer that depend on the CPU (ORT 1.32's source)."""

    int8_allowed: bool  # QDQIsInt8Allowed(): true on ARM; false elsewhere, where QDQS8ToU8Transformer runs
    nchwc: bool  # NchwcTransformer registered: MlasNchwcGetBlockSize() > 1, x86-64 only


class PlatformAccuracy(_Model):
    samples_run: int  # the first N eval samples, the same on every level graph of every artifact
    samples_total: int
    budget_seconds: float
    seconds: float  # the emulated runs, as measured
    reference: str  # what each SQNR is against
    how: str


class SideBySideRow(_Model):
    """One artifact at one level: this machine | the platform, and the ORT rule behind each difference."""

    artifact: str
    level: str
    same: bool  # coverage, fused kernels, layout nodes and blockers all equal
    host_int8_coverage: float | None
    platform_int8_coverage: float | None
    host_kernels: dict[str, int] = Field(default_factory=dict)  # fused int8 kernels (op_key -> count)
    platform_kernels: dict[str, int] = Field(default_factory=dict)
    host_layout_ops: dict[str, int] = Field(default_factory=dict)  # NCHWc / NHWC nodes
    platform_layout_ops: dict[str, int] = Field(default_factory=dict)
    blockers_host_only: list[str] = Field(default_factory=list)  # "node: code"
    blockers_platform_only: list[str] = Field(default_factory=list)
    rules: list[str] = Field(default_factory=list)  # the ORT rule(s) that explain the difference


class PlatformAdvice(_Model):
    judged_on: str  # what the advice for an emulated platform rests on, said plainly
    candidates: list[str] = Field(default_factory=list)
    choice: str | None = None


class PlatformError(_Model):
    code: str
    message: str
    hint: str | None = None


class PlatformReport(_Model):
    name: str  # as options.platforms names it: "arm64", "arm64:cortex-a53"
    arch: str
    emulated: bool
    cpu: str
    qemu_cpu: str | None = None
    status: Literal["ok", "unavailable"]
    error: PlatformError | None = None
    rules: PlatformRules
    onnxruntime: str | None = None  # the version the emulated process imported
    # artifact -> level -> the same fields as artifacts.<name>.optimized, from the graphs the platform's ORT saved
    optimized: dict[str, dict[str, OptimizedLevel]] = Field(default_factory=dict)
    decisions: list[DecisionRow] = Field(default_factory=list)
    accuracy: PlatformAccuracy | None = None
    latency: str = LATENCY_NOT_MEASURED
    side_by_side: list[SideBySideRow] = Field(default_factory=list)
    advice: PlatformAdvice | None = None
    timings: dict[str, float] = Field(default_factory=dict)
