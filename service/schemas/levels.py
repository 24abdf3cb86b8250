"""Report sections about what ONNX Runtime makes of each file: the graph it runs at each
``GraphOptimizationLevel``, the rewrites between levels, numerics and latency per level,
cross-artifact agreement, the decisions table and lints.

Filled by the levels stage (``service.pipeline.runtime.levels``). Field names read by gates, the client
and the page are pinned in ``docs/CONTRACTS.md``: ``op_histogram``, ``int8_coverage``,
``numerics`` (``outputs``, ``worst_*``), ``latency`` (``median_ms``, ``p90_ms``, ``runs``,
``intra_op_threads``), ``diff.rewrites[].summary``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.advice import UnfusedNode


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class NodeSummary(_Model):
    """One node of the graph ORT runs, with the attributes that change what it computes."""

    op_type: str
    domain: str = ""  # "" for ai.onnx
    name: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any] = Field(default_factory=dict)
    # For int8 kernels: dtype of the activation operand (from its zero point), e.g. "uint8".
    activation_dtype: str | None = None


class LayoutInfo(_Model):
    """Layout rewrites ORT made for the CPU EP (``layout`` level and up)."""

    nhwc_nodes: int = 0  # com.microsoft.* nodes running channels-last (NhwcTransformer)
    transposes_inserted: int = 0  # Transposes beyond those in the file
    nchwc_nodes: int = 0  # com.microsoft.nchwc.* nodes (NchwcTransformer, x86-64 only)
    reorders: int = 0  # com.microsoft.nchwc.ReorderInput / ReorderOutput


class BiasState(_Model):
    int32: int = 0  # biases fed as int32 (QLinearConv/QGemm operand, or DQ of an int32 initializer)
    float32: int = 0  # float biases on Conv / Gemm
    summary: Literal["int32", "float32", "mixed", "none"] = "none"


class Rewrite(_Model):
    """One connected change between two consecutive levels."""

    summary: str  # "DequantizeLinear x3 + Conv + Relu + QuantizeLinear -> QLinearConv"
    kind: str  # qdq_fusion, qdq_drop, s8_to_u8, nhwc, nchwc, bias_int32, weight_int8, dq_duplicated, ...
    removed: list[str] = Field(default_factory=list)  # node names (graph before)
    added: list[str] = Field(default_factory=list)  # node names (graph after)
    modified: list[str] = Field(default_factory=list)  # same name on both sides, inputs/outputs changed
    transformer: str | None = None  # likely ORT GraphTransformer, from a table of patterns
    # With options.attribution: True when disabling one of ``transformer`` at this level undoes
    # the rewrite (``optimization.disable_specified_optimizers``); None when not checked.
    confirmed: bool | None = None
    confirmed_by: list[str] = Field(default_factory=list)


class LevelDiff(_Model):
    previous: str  # the previous level, or "file" for disable_all (the file as written)
    nodes_removed: int
    nodes_added: int
    rewrites: list[Rewrite] = Field(default_factory=list)


class OutputNumerics(_Model):
    name: str  # output name in this artifact (matched to the fp32 output by position)
    reference: str  # fp32 output name
    # "shape": the output's shape depends on the values computed (it follows a NonMaxSuppression,
    # NonZero, ...: ``data_dependent`` says which), so fp32 and this file may list different rows and
    # only the shapes are compared; sqnr_db, cosine and max_abs_error are then null.
    # "exact": an integer, bool or string output (a class label, a TopK index, a count, a mask) is
    # right or wrong, so it has ``mismatch_share`` and null sqnr_db and cosine (the distance between
    # two class indices is no error signal); max_abs_error is the largest difference for numbers.
    compared: Literal["elementwise", "exact", "shape"] = "elementwise"
    data_dependent: str | None = None
    shape: list[int] | None = None  # with compared "shape": this file's, every eval sample concatenated
    reference_shape: list[int] | None = None  # and fp32's
    sqnr_db: float | None  # None when the error is exactly zero (infinite SQNR), or compared "shape"
    cosine: float | None
    max_abs_error: float | None  # over the positions where both are finite
    # Values that are inf or NaN here where fp32 has a number (or another non-finite value); when
    # nonzero, sqnr_db is the floor (-200) and cosine 0.
    nonfinite: int = 0
    # The one value this file's output takes over every eval sample, when fp32's takes more than one:
    # the output collapsed (its quantization step, or an upstream one, exceeds everything it varies by),
    # so the SQNR measures a constant, not noise on a signal.
    constant_value: float | None = None
    mismatch_share: float | None = None  # with compared "exact": share of elements that differ from fp32
    # Quantization step of this output (scale of the DQ that produces it), when quantized.
    output_step: float | None = None
    # vs the previous level of the same artifact
    drift_max_abs: float | None = None
    drift_steps: float | None = None
    # The figure that judges this output (runtime/output_kinds.py): "sqnr" (sqnr_db, cosine and max_abs_error
    # count in the level's worst figures), "mismatch_share" (compared "exact"), "angular_error" (a circular
    # output: angular_error_max/_mean), "argmax_agreement" (a saturated classifier), or null: not measured,
    # ``not_measured`` says why (compared by shape, the same on every eval sample, other random draws). Outputs
    # not judged by SQNR keep their sqnr_db here, and it counts in no worst figure.
    judged_by: Literal["sqnr", "mismatch_share", "angular_error", "argmax_agreement"] | None = "sqnr"
    not_measured: str | None = None
    # What fp32's output is, when SQNR cannot judge it: "circular" (angles that wrap), "near_constant" (the same
    # on every eval sample), "saturated" (one-hot probabilities), with what was seen.
    kind: Literal["circular", "near_constant", "saturated"] | None = None
    kind_detail: str | None = None
    angular_error_max: float | None = None  # radians, |this - fp32| wrapped into [-pi, pi)
    angular_error_mean: float | None = None
    # Probabilities along the last axis (a classifier): share of rows whose top class is fp32's.
    argmax_agreement: float | None = None


class LevelNumerics(_Model):
    outputs: list[OutputNumerics]
    # The worst figures are over the float outputs compared element-wise; when there is none (every
    # output is compared by shape or exactly), all three are null and ``elementwise_outputs`` is 0.
    worst_sqnr_db: float | None
    worst_cosine: float | None
    worst_max_abs_error: float | None
    elementwise_outputs: int | None = None
    # Over the outputs compared exactly (labels, indices): the largest share of elements that differ
    # from fp32; null when there is none.
    worst_mismatch_share: float | None = None
    exact_outputs: int = 0
    samples: int
    # ``elementwise_outputs`` counts the outputs judged by SQNR, which the worst figures above cover. The
    # others' figures: the largest mean angular error of a circular output (radians; each output's largest
    # is ``angular_error_max``), the lowest argmax agreement of a classifier output (probabilities); and how
    # many outputs have no accuracy figure at all (``judged_by`` null).
    worst_angular_error: float | None = None
    worst_argmax_agreement: float | None = None
    not_measured_outputs: int = 0
    # "measured": every output has a figure; "partly measured": some have none; "not measured": none has, so
    # nothing here says how accurate the file is (a gate on any accuracy metric fails, saying why).
    accuracy: Literal["measured", "partly measured", "not measured"] = "measured"


class LatencyStats(_Model):
    median_ms: float
    p90_ms: float
    runs: int
    warmup: int  # untimed runs just before timing (the evaluation runs on the same session count too)
    intra_op_threads: int
    batch: dict[str, list[int]] = Field(default_factory=dict)  # input shapes timed
    # The adaptive protocol (service/pipeline/runtime/latency.py) and the load while it measured.
    p10_ms: float | None = None
    runs_from_eval: int = 0  # timed runs that were evaluation runs (0 since accuracy runs untimed: issue 39)
    median_ci_ms: list[float] | None = None  # distribution-free ~95% interval of the median
    spread: float | None = None  # (p90 - p10) / median
    stable: bool | None = None  # the interval reached +-stable_rel of the median
    cpu_share: float | None = None  # process CPU time / (wall x threads) over the timed runs
    load_avg_1m: float | None = None  # highest 1-minute load average seen while timing
    concurrent_jobs: int | None = None  # jobs running in the service meanwhile (this one included)
    noisy: bool = False
    noisy_reasons: list[str] = Field(default_factory=list)
    protocol: str | None = None
    timed_with: str | None = None  # "<level>": same graph as that level, its measurement stands


class ProfiledNode(_Model):
    node: str  # as ORT's profiler names it (the level graph's node name)
    op_type: str  # ORT's kernel name, no domain (the profiler gives none)
    ms: float
    share: float  # of the profile's total_ms
    kernel: str | None = None  # operand types from the trace: "s8s8", "u8s8", "f32"


class OpProfile(_Model):
    """One run under ORT's profiler, outside the timed runs (runtime/profile.py)."""

    total_ms: float  # ORT's time for the run (SequentialExecutor::Execute)
    kernels_ms: float  # the node times added up
    unattributed_ms: float = 0.0  # total_ms - kernels_ms: the executor's and the profiler's time between nodes
    by_op_type: dict[str, float] = Field(default_factory=dict)  # ms, slowest first
    by_class: dict[str, float] = Field(default_factory=dict)  # int8 kernels, float kernels, Q/DQ, layout, other
    op_counts: dict[str, int] = Field(default_factory=dict)
    kernels: dict[str, dict[str, int]] = Field(default_factory=dict)  # int8 op -> {"s8s8": nodes, ...}
    by_kernel: dict[str, float] = Field(default_factory=dict)  # ms by operand types: {"s8s8": ..., "f32": ...}
    top_nodes: list[ProfiledNode] = Field(default_factory=list)
    warmup: int = 0  # unread runs of the profiled session before the profiled one
    runs_in_profile: int = 0  # model_run events ORT's trace holds: warmup + the profiled run, no timed run
    profiled_run_ms: float | None = None  # wall time of the profiled run
    overhead: float | None = None  # profiled_run_ms / the timed median - 1
    where_it_loses: str | None = None  # vs fp32 at this level, when slower (timed medians)
    how: str = ""


class OptimizedLevel(_Model):
    level: str
    level_value: int | None = None  # GraphOptimizationLevel value
    file: str | None = None  # "<artifact>.<level>.onnx", relative to the artifact folder
    error: str | None = None  # session creation or run failed at this level
    op_histogram: dict[str, int] = Field(default_factory=dict)
    node_count: int = 0
    nodes: list[NodeSummary] = Field(default_factory=list)
    quantize_linear: int = 0
    dequantize_linear: int = 0
    int8_kernels: dict[str, int] = Field(default_factory=dict)
    # Conv/MatMul/Gemm/... in the fp32 file as written (main graph and bodies; not a local function's
    # body). Not the coverage denominator: ORT folds, inlines and fuses, so the graph that runs differs.
    compute_ops_fp32: int = 0
    # int8_coverage and its two counts, over this level's graph as ORT saved it (vocabulary.int8_coverage):
    # int8 compute kernels / (those + compute ops on float data); None without compute ops.
    compute_ops_int8: int = 0
    compute_ops_float: dict[str, int] = Field(default_factory=dict)
    int8_coverage: float | None = None
    # int8 kernels by activation dtype: {"uint8": 3, "int8": 0}; x86 runs uint8 (QDQS8ToU8Transformer).
    kernel_activation_dtypes: dict[str, int] = Field(default_factory=dict)
    ops_float: dict[str, int] = Field(default_factory=dict)  # non-Q/DQ ops computing on float
    ops_float_reasons: dict[str, str] = Field(default_factory=dict)  # op -> why ORT runs it in float here
    # One row per node ORT runs in float at this level and the ORT condition it fails (quantized artifacts).
    unfused: list[UnfusedNode] = Field(default_factory=list)
    bias: BiasState = Field(default_factory=BiasState)
    layout: LayoutInfo = Field(default_factory=LayoutInfo)
    diff: LevelDiff | None = None
    numerics: LevelNumerics | None = None
    latency: LatencyStats | None = None
    profile: OpProfile | None = None  # where the time goes, wherever latency is timed
    # What this level did not measure, and the option that would: {"latency": "not timed: ..."}
    # ("numerics" at depth "structure", "latency" at a level outside options.latency_levels).
    not_measured: dict[str, str] = Field(default_factory=dict)
    session_seconds: float | None = None
    # Wall seconds of this level's accuracy runs and numerics, plus its latency runs when it was timed
    # (0 when it reused the level it equals): what ``Report.cost`` adds up per level and per artifact.
    # Set in the finished report only (a partial report's levels have it null: timing adds to it).
    evaluate_seconds: float | None = None
    # The graph ORT wrote at this level (service/pipeline/runtime/level_graphs.py): its SHA-256 with
    # the initializers in "model.data" (in canonical form: node names cleared, nodes sorted, since ORT
    # names and orders some generated nodes differently per session), theirs, and both sizes. ``file_stored`` false: the job kept only
    # these digests, and a download creates the session again and checks them before serving the file.
    graph_sha256: str | None = None
    weights_sha256: str | None = None
    graph_bytes: int | None = None
    weights_bytes: int | None = None
    download_bytes: int | None = None  # the self-contained .onnx a download returns (graph with its weights)
    file_stored: bool = True
    # The level before this one, when ORT wrote a byte-identical graph: its outputs and latency
    # were reused, not measured again.
    same_graph_as: str | None = None


class AgreementRow(_Model):
    a: str
    b: str
    level: str
    output: str  # output of ``a`` (matched by position)
    # "exact": an integer, bool or string output (labels, indices): equal_share is its figure, and
    # sqnr_db and cosine are null
    compared: Literal["elementwise", "exact"] = "elementwise"
    sqnr_db: float | None  # b measured against a; null when equal (or compared "exact")
    cosine: float | None
    max_abs_error: float | None  # null for strings
    max_diff_steps: float | None = None  # in units of a's output quantization step
    equal_share: float  # share of elements that are bitwise equal


class DecisionRow(_Model):
    decision: str
    # artifact -> "in the file", "at session level extended", "never", "n/a (...)", ...
    where: dict[str, str] = Field(default_factory=dict)
    detail: dict[str, str] = Field(default_factory=dict)  # artifact -> evidence


class Lint(_Model):
    code: str
    severity: Literal["info", "warning", "error"] = "warning"
    artifact: str | None = None
    message: str
    hint: str | None = None  # what to do
    source: str | None = None  # where ORT says so


class PlatformNote(_Model):
    """Where this machine's ORT differs from what the course chapter measured on arm64."""

    topic: str  # "activation dtype", "NCHWc", "NHWC MaxPool", "int8 dot product"
    chapter: str  # what the chapter states (arm64, ORT 1.30)
    here: str  # what happened on this machine, for this model
    evidence: list[str] = Field(default_factory=list)  # "<artifact> at <level>: ..."
