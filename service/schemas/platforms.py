"""The report's ``platforms``: what ORT makes of each file on a platform other than the machine that
ran the job (arm64 as emulated ORT), side by side with this machine's ``artifacts.<name>.optimized``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from service.schemas.levels import DecisionRow, LatencyStats, LevelNumerics, OptimizedLevel, _Model

LATENCY_NOT_MEASURED = "not measured: emulated"
LATENCY_QNN = "not measured: QNN's HTP is emulated on this x86 CPU; its times say nothing about the NPU"


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
    # A target (qnn, openvino:cpu, ort:<version>): each difference from this machine, with its reason, in words
    # ("ORT 1.22.1 fuses 1 Conv less on pt2e_qdq at extended: Conv 3 vs 2, QLinearConv 0 vs 1").
    differences: list[str] = Field(default_factory=list)
    host_sqnr_db: float | None = None
    platform_sqnr_db: float | None = None


class PlatformAdvice(_Model):
    judged_on: str  # what the advice for an emulated platform rests on, said plainly
    candidates: list[str] = Field(default_factory=list)
    choice: str | None = None


class PlatformError(_Model):
    code: str
    message: str
    hint: str | None = None


class NodeLeft(_Model):
    """A node the target left to ORT's CPU EP (or, for OpenVINO, refused), with the target's own reason."""

    node: str
    op_type: str | None = None
    reason: str


class TargetArtifact(_Model):
    """One artifact on one target (``platforms.<target>.artifacts.<name>``): the contract clients and CI read.

    ``nodes_taken`` is counted as the target counts it: QNN's op trace ``summary.supported_nodes`` over the
    graph ORT hands it (``nodes_total``); OpenVINO converts the whole file or refuses it; an ORT release runs
    every node (its level graphs, ``op_histogram`` per level, take this place)."""

    status: Literal["ok", "failed"]
    error: str | None = None  # the target's own error, as it said it
    hint: str | None = None  # what to change
    nodes_taken: int | None = None
    nodes_total: int | None = None
    nodes_left: list[NodeLeft] = Field(default_factory=list)
    # Set when the target silently ran the file on ORT's CPU EP (a backend that did not load, dynamic dims):
    # then nothing here is the target's result, and status is "failed".
    fallback: str | None = None
    op_histogram: dict[str, dict[str, int]] = Field(default_factory=dict)  # ORT releases: level -> op -> count
    precision_histogram: dict[str, int] = Field(default_factory=dict)  # OpenVINO: runtimePrecision -> layers
    kernels: dict[str, int] = Field(default_factory=dict)  # OpenVINO: "Convolution: brgconv_avx512_I8" -> layers
    qnn_ops: dict[str, int] = Field(default_factory=dict)  # QNN: the QNN op types its graph holds
    numerics: LevelNumerics | None = None  # vs fp32 on this machine, same samples, same judges
    latency: LatencyStats | None = None  # native targets only (OpenVINO; ORT releases: per level in optimized)
    context_binary: list[str] = Field(default_factory=list)  # QNN: the EP-context files, downloadable by name
    free_dims: dict[str, int] = Field(default_factory=dict)  # dynamic dims fixed from the job's shapes
    seconds: float | None = None  # compile (session creation) on the target


class PlatformReport(_Model):
    name: str  # as options.platforms names it: "arm64", "arm64:cortex-a53", "qnn:69", "openvino:cpu", "ort:1.22.1"
    # "emulated" (arm64 under qemu), "ort" (another ONNX Runtime release here), "qnn" (Qualcomm's HTP, emulated
    # on x86 by the QNN EP), "openvino" (OpenVINO's CPU plugin here)
    kind: Literal["emulated", "ort", "qnn", "openvino"] = "emulated"
    target: str | None = None  # what runs it: "onnxruntime 1.22.1", "onnxruntime-qnn 2.7.0 (QNN 2.51), soc_model 69"
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
    # Targets (kind qnn, openvino, ort): per artifact (and fp32) what the target took, left, and measured.
    artifacts: dict[str, TargetArtifact] = Field(default_factory=dict)
    advice: PlatformAdvice | None = None
    timings: dict[str, float] = Field(default_factory=dict)
