"""The report: what each tool wrote into its file, and (see ``levels``) what ORT made of it.

Frozen pydantic models; the OpenAPI document is generated from them, and the client reads the
JSON they produce (the JSON is the contract, ``schema_version`` says which one).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.options import ComparisonOptions
from service.schemas.advice import AdviceEntry
from service.schemas.layers import LayersReport
from service.schemas.levels import AgreementRow, DecisionRow, Lint, OptimizedLevel, PlatformNote
from service.schemas.platforms import PlatformReport

SCHEMA_VERSION = "1"

Status = Literal["ok", "failed", "skipped"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class TensorSpec(_Model):
    name: str
    dtype: str  # numpy name: float32, int64, bool, ...; a non-tensor output its ONNX type: seq(map(int64,tensor(float32)))
    shape: list[int | str | None]  # as declared: ints, symbolic names, or None for unknown


class CpuInfo(_Model):
    arch: str
    model_name: str | None = None
    logical_cores: int | None = None
    # The ISA flags that change which int8 kernels MLAS picks (u8s8 vs s8s8, VNNI dot products).
    isa: dict[str, bool] = Field(default_factory=dict)


class Environment(_Model):
    versions: dict[str, str]
    python: str
    platform: str
    cpu: CpuInfo


class ModelInfo(_Model):
    name: str
    sha256: str
    format: Literal["onnx", "pt2", "example"]
    opset_imports: dict[str, int]
    ir_version: int | None = None
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    node_count: int
    # The concrete shapes every sample was made with, and where each dynamic value came from.
    resolved_input_shapes: dict[str, list[int]] = Field(default_factory=dict)
    shape_notes: list[str] = Field(default_factory=list)
    # What else the file tells a reader about itself (e.g. operator domains imported but unused).
    notes: list[str] = Field(default_factory=list)


class SamplesInfo(_Model):
    source: Literal["generated", "uploaded"]
    calibration_count: int
    eval_count: int
    seed: int | None = None
    # Per input: how values were made (e.g. "normal(0, 1)", "uniform int [0, 10)", "uploaded").
    generators: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    # False when the evaluation samples are calibration samples (an .npz with too few to hold any out)
    eval_held_out: bool = True


class PathError(_Model):
    stage: str
    # What CI switches on: a refusal's stable code (``service/errors.py``: path_skipped,
    # ort_quantizer_failed, nonfinite_calibration, pt2e_file_rejected, ...), or out_of_memory,
    # ort_run_failed (ORT ran the file at no level) and path_failed (a tool raised something we have
    # no rule for: ``type`` names it, the message quotes it).
    code: str = "path_failed"
    type: str  # the exception class, e.g. "OrtQuantizerFailed", "RuntimeError"
    message: str
    hint: str | None = None


class RepeatedGroup(_Model):
    copies: int  # names that store this content
    bytes_each: int
    names: list[str]  # the first 4


class RepeatedInitializers(_Model):
    groups: int  # distinct contents stored more than once
    extra_copies: int  # copies beyond the first of each
    extra_bytes: int  # bytes those copies take
    largest: list[RepeatedGroup] = Field(default_factory=list)  # the 5 groups that waste the most
    # of extra_bytes, those of copies that come from quantcompare's per-reader copies of a shared bias
    # (their equal zero points and scales, as ORT writes one per quantized tensor)
    extra_bytes_from_bias_copies: int = 0


class FileInfo(_Model):
    path: str  # relative to the job's artifact folder, e.g. "ort_qdq.onnx"
    size: int  # bytes on disk: the .onnx file and the external data files it names
    external_data_bytes: int = 0  # of which in external data files (model.onnx.data)
    sha256: str
    producer_name: str
    producer_version: str
    ir_version: int
    opset_imports: dict[str, int]
    # The file's metadata_props, at most 32 entries, keys shortened to 200 characters and values to
    # 2000 (a shortened one ends "... [N more characters in the file]"); the file keeps all of it.
    metadata_props: dict[str, str] = Field(default_factory=dict)
    metadata_props_left_out: int = 0  # entries beyond the first 32
    node_count: int
    # Weights (initializers of 1 KiB or more) the file stores more than once under other names, with
    # the same dtype, shape and bytes: torch's export writes a quantized copy per use of a shared weight.
    repeated_initializers: RepeatedInitializers | None = None


class QuantizedTensor(_Model):
    """One tensor that the file stores or carries in quantized form."""

    name: str  # the float tensor this stands for (DQ output / Q input), or the QLinear operand
    role: Literal["weight", "activation", "bias", "other"]
    dtype: str  # int8, uint8, int16, uint16, int32, int4, ...
    scale: list[float]
    zero_point: list[int]
    axis: int | None = None  # set for per-channel
    block_size: int | None = None
    per_channel: bool
    symmetric: bool  # every zero point at the dtype's midpoint (0 for signed)
    # weight storage: "int8 initializer" (quantized in the file) or "float initializer + QuantizeLinear"
    # (quantized when the session runs); activations are "runtime".
    storage: Literal["quantized_initializer", "float_initializer_plus_quantize", "runtime"]
    written_by: str  # op that carries the parameters: QuantizeLinear, DequantizeLinear, QLinearConv, ...
    consumers: list[str] = Field(default_factory=list)  # op_types that read the dequantized value


class BiasInfo(_Model):
    node: str
    op_type: str
    dtype: str  # "int32" when quantized in the file, else "float32"
    quantized_in_file: bool
    scale_matches_input_times_weight: bool | None = None  # int32 bias scale == s_x * s_w


class FoldedActivation(_Model):
    op_type: str  # Relu / Clip that the fp32 model has and this file does not
    count: int
    evidence: str


class QuantizationInventory(_Model):
    format: Literal["qdq", "qoperator", "mixed", "float"]
    quantize_linear: int
    dequantize_linear: int
    tensors: list[QuantizedTensor]
    weights: Literal["quantized_initializer", "float_initializer_plus_quantize", "mixed", "none"]
    bias: list[BiasInfo]
    # "int32", "float32", "mixed", "none", or the integer dtype every quantized bias is stored in
    # when it is not int32 (int8: a quantizer that took a bias for an activation)
    bias_summary: str
    # op_type (domain-qualified when not ai.onnx) -> count
    ops_quantized: dict[str, int]  # compute ops with every float input coming from a DequantizeLinear
    ops_float: dict[str, int]  # ops that run in float on float inputs
    ops_float_reasons: dict[str, str] = Field(default_factory=dict)
    int8_kernels_in_file: dict[str, int]  # QLinear*, ConvInteger, MatMulInteger, com.microsoft.Q*
    folded_activations: list[FoldedActivation] = Field(default_factory=list)
    activation_dtypes: list[str]
    weight_dtypes: list[str]


class ToolInfo(_Model):
    name: str  # "torchao PT2E (XNNPACKQuantizer)", "onnxruntime quantize_static", ...
    version: str
    settings: dict[str, Any] = Field(default_factory=dict)
    calibration: str | None = None  # which observer / calibrator computed activation ranges
    notes: list[str] = Field(default_factory=list)
    # ONNX uploads, pt2e_qdq only: the ONNX -> torch conversion (converter, ops, folded,
    # max_abs_error_vs_onnx, parity, seconds, notes); see quantize/onnx_torch/program.py.
    conversion: dict[str, Any] | None = None


class Artifact(_Model):
    name: str
    status: Status
    error: PathError | None = None
    tool: ToolInfo | None = None
    file: FileInfo | None = None
    quantization: QuantizationInventory | None = None
    optimized: dict[str, OptimizedLevel] = Field(default_factory=dict)
    seconds: float | None = None
    # Whether the figures say how accurate this file is, at its highest level with numerics
    # (``LevelNumerics.accuracy``): "not measured" on an ok path means no output has an accuracy figure
    # (every output compared by shape, the same on every sample, or drawn from unseeded random ops), and
    # ``accuracy_note`` says which and why. Null for fp32 and for a path that did not run.
    accuracy: Literal["measured", "partly measured", "not measured"] | None = None
    accuracy_note: str | None = None


class GateResult(_Model):
    gate: str  # "ort_qdq.all.sqnr_db>=25"
    passed: bool
    actual: float | None = None
    # Relative gates only: the deciding artifact's baseline figure and actual - baseline.
    baseline: float | None = None
    delta: float | None = None
    message: str
    noisy: bool = False  # a latency it read was measured under load (LatencyStats.noisy)


class Verdict(_Model):
    passed: bool
    gates: list[GateResult] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)


class JobCost(_Model):
    """What the job cost, in the unit of the model (verdict/job_cost.py): the job's seconds over one fp32
    inference, and where the evaluate stage spent them, per level and per artifact, as measured."""

    fp32_inference_ms: float | None  # fp32's median latency at the highest level timed (its thread count)
    job_seconds: float  # the stages' seconds added up (``Report.timings``)
    inference_times: float | None  # job_seconds / one fp32 inference
    stages: dict[str, float] = Field(default_factory=dict)  # stage -> fp32 inference-times
    evaluate_by_level: dict[str, float] = Field(default_factory=dict)  # level -> seconds, every artifact
    evaluate_by_artifact: dict[str, float] = Field(default_factory=dict)  # artifact -> seconds, every level
    how: str = ""
    # The measured seconds the cheaper option sets would have left to evaluate, and what to set.
    hints: list[str] = Field(default_factory=list)


class NotMeasured(_Model):
    """A figure this job did not measure, and the option that would measure it (issue 39)."""

    what: str  # "latency at basic, extended, layout", "accuracy (numerics, agreement)", ...
    option: str  # what to set: "latency_levels: [...]", "depth: 'standard'", ...


class JobCores(_Model):
    """The cores the job's untimed work used: the cores no other running job on the machine used (its
    cores ledger), up to ``QUANTCOMPARE_JOB_CORES``; latency is timed alone on its own threads."""

    cores: int  # the figure used most often
    source: str  # why: the machine's usable cores, the jobs sharing them, the cap that bound it
    how: str
    low: int | None = None  # the fewest and most cores a batch got, when other jobs came and went
    high: int | None = None


class ExtrasStep(_Model):
    """One step of the extras' budget, in the order it is spent (pipeline/extras_budget.py)."""

    step: str  # "advice's best candidate", "per-tensor table at 8 samples", "further candidates", ...
    reached: bool
    detail: str  # what it did, or what it left out and the option that reaches it


class ExtrasSpent(_Model):
    """How the extras' budget (advice and the per-tensor table) was set and spent."""

    budget_seconds: float | None  # None: no budget (depth full)
    how: str
    spent_seconds: float
    steps: list[ExtrasStep] = Field(default_factory=list)


class Report(_Model):
    schema_version: str = SCHEMA_VERSION
    id: str | None = None
    created_at: datetime
    environment: Environment
    options: ComparisonOptions
    model: ModelInfo
    samples: SamplesInfo
    artifacts: dict[str, Artifact]
    agreement: list[AgreementRow] = Field(default_factory=list)
    decisions: list[DecisionRow] = Field(default_factory=list)
    lints: list[Lint] = Field(default_factory=list)
    # Where this machine's ORT differs from the course chapter's arm64 measurements.
    platform: list[PlatformNote] = Field(default_factory=list)
    # options.platforms beyond this machine (arm64 as emulated ORT): name -> its level graphs, side by side.
    platforms: dict[str, PlatformReport] = Field(default_factory=dict)
    # What to change, re-run for real and measured (advice/advice.py); refuted = measured, not better.
    advice: list[AdviceEntry] = Field(default_factory=list)
    advice_refuted: list[AdviceEntry] = Field(default_factory=list)
    # The candidates the extras' budget left out (options.extras), each with the reason; in the order
    # they would have run (expected gain: advice/advice.by_expected_gain).
    advice_not_run: list[AdviceEntry] = Field(default_factory=list)
    # Per-tensor error of each quantized file against fp32 (options.layers); None when off.
    layers: LayersReport | None = None
    # None only in a partial report: the gates are decided once every section is done.
    verdict: Verdict | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    cost: JobCost | None = None
    # The report as it comes (GET /v1/comparisons/{id} while the job runs): ``partial`` until the
    # job is done; ``sections_done`` in the order they finished (``compare.SECTIONS``). A partial report
    # holds only finished sections, and nothing in it changes later (timings and cost come at the end).
    partial: bool = False
    sections_done: list[str] = Field(default_factory=list)
    # What this job did not measure (its depth, latency_levels, switches) and the option that would.
    not_measured: list[NotMeasured] = Field(default_factory=list)
    # Both come with the finished report: the cores follow the load as the job goes, and the extras are
    # spent last.
    job_cores: JobCores | None = None
    extras: ExtrasSpent | None = None
