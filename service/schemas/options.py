"""Options of one comparison, as a user writes them and as they are resolved.

The same model serves the CLI (``--options JSON``), the HTTP API (``options`` form field or JSON
body) and the report (``options`` echoes them resolved). Unknown keys are refused rather than
ignored: a CI job that misspells a gate must hear about it.
"""

from __future__ import annotations

import json
import platform as _platform
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The paths a job runs when options.artifacts is left out (the mission's three).
ARTIFACTS = ("pt2e_qdq", "ort_qdq", "ort_qoperator")
# Paths made by other tools in a subprocess (quantize/tool_paths.py), asked for by name in options.artifacts.
TOOL_ARTIFACTS = ("nncf_qdq", "modelopt_qdq", "quark_qdq")
BUILTIN_ARTIFACTS = ARTIFACTS + TOOL_ARTIFACTS
# A quantized file the user brings (multipart part ``artifact.<name>``) is reported as ``artifacts.<name>``:
# any name of this shape that is not fp32 nor a built-in path's.
BROUGHT_NAME = r"^[a-z][a-z0-9_]{0,39}$"


def brought_name_refusal(name: str) -> str | None:
    """Why ``name`` cannot name a brought file (``artifact.<name>``), or None."""
    if not re.fullmatch(BROUGHT_NAME, name):
        return "use lowercase letters, digits and _, starting with a letter, at most 40 characters"
    if name in ("fp32", "baseline", *BUILTIN_ARTIFACTS, "disable_all", "basic", "extended", "layout", "all"):
        return "it is the name of a built-in artifact or a level"
    return None
LEVELS = ("disable_all", "basic", "extended", "layout", "all")
# GraphOptimizationLevel values, in the order ORT applies them.
LEVEL_VALUES = {"disable_all": 0, "basic": 1, "extended": 2, "layout": 3, "all": 99}

QuantArtifact = Literal["pt2e_qdq", "ort_qdq", "ort_qoperator", "nncf_qdq", "modelopt_qdq", "quark_qdq"]
Level = Literal["disable_all", "basic", "extended", "layout", "all"]
# How deep a comparison goes (docs/CONTRACTS.md, "Depth"): structure = files, level graphs, diffs,
# blockers, decisions; standard adds accuracy at every level, latency at latency_levels, the per-tensor
# table and advice; full adds latency at every level and the per-tensor error by level.
Depth = Literal["structure", "standard", "full"]
# Gate metrics by the depth that measures them (the others read the files and level graphs only).
ACCURACY_METRICS = frozenset({"sqnr_db", "cosine", "max_abs_error", "mismatch_share", "angular_error",
                              "argmax_agreement"})


class _Strict(BaseModel):
    # No NaN or Infinity (Python's json reads them): a report stores them as null, which a gate's
    # value cannot be, and no sample generator can draw them.
    # strict: no coercion between JSON types. Lax parsing read `true` as a count of 1, "yes" or 1 as a
    # switch and "4" as a number: a CI job's typo ran a different comparison instead of being refused.
    # (An integer is still a valid float, as in JSON.)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class InputValues(_Strict):
    """How to make calibration values for one input when no .npz is uploaded."""

    low: float | None = None
    high: float | None = None
    constant: float | None = None

    @field_validator("high")
    @classmethod
    def _high_above_low(cls, v, info):
        low = info.data.get("low")
        if v is not None and low is not None and v <= low:
            raise ValueError("high must be greater than low")
        return v

    @model_validator(mode="after")
    def _range_or_constant(self):
        if self.constant is not None and (self.low is not None or self.high is not None):
            raise ValueError("give either a constant or a range (low and high), not both")
        if (self.low is None) != (self.high is None):
            raise ValueError("give low and high together (high is exclusive), or a constant")
        return self


class ToolPresets(_Strict):
    """Which settings each tool path quantizes with. ``matched``: the settings of the ORT paths' matched preset
    as far as the tool has them (MinMax, int8 asymmetric activations, int8 symmetric per-channel weights; what it
    cannot match is listed in ``artifacts.<name>.tool.settings.not_matched``). The others are the tool's own:
    NNCF ``default`` (its MIXED preset, bias correction and overflow fix on), ModelOpt ``tensorrt`` (its int8
    defaults: entropy calibration, fp16 graph, TensorRT placement rules), Quark ``a8w8`` and ``xint8``
    (power-of-two scales for NPUs)."""

    nncf_qdq: Literal["matched", "default"] = "matched"
    modelopt_qdq: Literal["matched", "tensorrt"] = "matched"
    quark_qdq: Literal["matched", "a8w8", "xint8"] = "matched"


class Pt2eOptions(_Strict):
    per_channel: bool = True
    # Ops of the torch graph PT2E may start on (pt2e.refuse_oversized_program): past it the path is
    # skipped at once, with the nodes that made it big, instead of running past the job's time limit.
    max_graph_ops: int = Field(8000, ge=1, le=10_000_000)
    # Wall-clock seconds the PT2E path may run (time_limit.py): past it the path fails with
    # path_time_limit and the job goes on with the ORT paths. None: half the job's time limit on a
    # server (QUANTCOMPARE_JOB_TIMEOUT_S), no limit in the CLI.
    time_limit_s: float | None = Field(None, gt=0, le=7 * 24 * 3600)


# The extra_options keys onnxruntime 1.32's quantize_static and its calibrators read (from its
# source). ORT ignores any other key silently, so a misspelt one would quietly change nothing.
ORT_EXTRA_OPTIONS = frozenset({
    "ActivationRestrictedAsymmetric", "ActivationSymmetric", "AddQDQPairToWeight", "BlockSize",
    "CalibMaxIntermediateOutputs", "CalibMovingAverage", "CalibMovingAverageConstant", "CalibPercentile",
    "CalibStridedMinMax", "CalibTensorRangeSymmetric", "DedicatedQDQPair", "DefaultTensorType", "EnableSubgraph",
    "ForceQuantizeNoInputCheck", "MatMulConstBOnly", "MinimumRealRange", "OpTypesToExcludeOutputQuantization",
    "QDQDisableWeightAdjustForInt32Bias", "QDQKeepRemovableActivations", "QDQOpTypePerChannelSupportToAxis",
    "QuantizeBias", "SmoothQuant", "SmoothQuantAlpha", "SmoothQuantFolding", "TensorQuantOverrides",
    "UseQDQContribOps", "WeightSymmetric", "extra.Sigmoid.nnapi",
})


class OrtQuantOptions(_Strict):
    """Overrides for ORT's ``quantize_static``; ``None`` means: take it from the preset."""

    calibrate_method: Literal["minmax", "entropy", "percentile", "distribution"] | None = None
    per_channel: bool | None = None
    activation_type: Literal["int8", "uint8"] | None = None
    weight_type: Literal["int8", "uint8"] | None = None
    reduce_range: bool | None = None
    pre_process: bool = True
    op_types_to_quantize: list[str] | None = None
    nodes_to_exclude: list[str] | None = None
    extra_options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("op_types_to_quantize")
    @classmethod
    def _some_op_types(cls, v):
        if v is not None and not v:  # an empty list reaches quantize_static as its default: every op type
            raise ValueError("give at least one op type (leave the key out for ORT's defaults)")
        return v

    @field_validator("extra_options")
    @classmethod
    def _known_extra_options(cls, v):
        unknown = sorted(set(v) - ORT_EXTRA_OPTIONS)
        if unknown:
            raise ValueError(f"quantize_static does not read {', '.join(unknown)}; "
                             f"known keys: {', '.join(sorted(ORT_EXTRA_OPTIONS))}")
        return v


# The ORT session config entries a job may set on the sessions that measure its files (``ort_session``):
# exactly those advice can emit as a change, each with the values ORT reads. Any other key is refused, not
# passed on: several entries make ORT write files where the key says (``ep.context_file_path``,
# ``session.optimized_model_external_initializers_file_name``), which an upload's options must never reach,
# and others change what the job measures without the report saying so. ``session.qdqisint8allowed``: "1"
# lets ORT's QDQ selectors take int8 activations (no QDQS8ToU8Transformer); unset, ORT takes
# QDQIsInt8Allowed(), true on arm, false elsewhere (graph_transformer_utils.cc:
# GetConfigOrDefault(kOrtSessionOptionsQDQIsInt8Allowed, QDQIsInt8Allowed() ? "1" : "0")).
QDQ_IS_INT8_ALLOWED = "session.qdqisint8allowed"
ORT_SESSION_ENTRIES: dict[str, tuple[str, ...]] = {QDQ_IS_INT8_ALLOWED: ("0", "1")}


def _allowed_entries() -> str:
    return "; ".join(f"{k} ({' or '.join(json.dumps(v) for v in vals)})" for k, vals in ORT_SESSION_ENTRIES.items())


class LatencyOptions(_Strict):
    """The adaptive protocol of service/pipeline/runtime/latency.py (``latency_alone``), at the levels
    ``latency_levels`` names: ``warmup`` untimed runs, then timed runs of the first evaluation sample
    until the median is stable (``stable_rel``), at least ``min_runs`` and at most ``runs`` per graph,
    within ``budget_seconds`` per job. The accuracy runs are untimed and never count."""

    enabled: bool = True
    runs: int = Field(10, ge=1, le=1000)  # most timed runs per graph
    min_runs: int = Field(5, ge=1, le=1000)
    warmup: int = Field(1, ge=0, le=100)  # untimed runs first
    stable_rel: float = Field(0.05, gt=0, le=1)  # half-width of the median's 95% interval / median
    budget_seconds: float = Field(60.0, ge=0, le=3600)  # top-up runs per job, shared by the graphs
    intra_op_threads: int = Field(1, ge=1, le=64)


class AdviceOptions(_Strict):
    """Re-run the changes the blockers point to (e.g. uint8 activations on x86) and measure them.

    The re-runs share the extras' budget with the per-tensor table (``ExtrasOptions``): the candidate with
    the highest expected gain is always measured, the others while the budget lasts; a candidate that
    would not fit is not re-run, and the report lists it with the reason."""

    enabled: bool = True
    level: Level = "all"


class ExtrasOptions(_Strict):
    """One budget for the extras (advice's re-runs and the per-tensor table), after the essentials (the
    files, the level graphs, accuracy at every level, latency at ``latency_levels``): ``share`` of the
    essentials' seconds, or ``seconds`` when given. Spent in order: advice's best candidate (always
    measured), the table at ``layers.min_samples``, further candidates, further table samples
    (service/pipeline/extras_budget.py). Depth "full" has no budget."""

    # 0.5: on the 2-core reference machine a real detector's essentials take ~85 fp32 inference-times,
    # its best candidate ~18 and the table at 8 samples ~34: half the essentials pays for both, and no more.
    share: float = Field(0.5, ge=0, le=100)
    seconds: float | None = Field(None, ge=0, le=36000)


class LayersOptions(_Strict):
    """Per-tensor error (report ``layers``): every float activation of the fp32 model against its
    counterpart in each quantized file, at ``disable_all``. Each SQNR has a 95% bootstrap interval;
    the table runs ``min_samples`` samples (the evaluation samples first, then more held-out ones),
    then more until its ranking is settled (the few worst tensors of each file separated from the rest by
    their intervals) or every interval is at most 2 dB wide, within the extras' budget (``ExtrasOptions``),
    ``max_samples`` and ``max_seconds``. Depth "full" goes on to the 2 dB target within its caps.
    ``by_level``: also the SQNR of each tensor at every other requested level where it still
    exists (the graph ORT saved at that level, run as written). ``retry_k > 0`` re-quantizes each
    artifact with its k worst origin nodes kept in float."""

    enabled: bool = True
    by_level: bool = False
    max_tensors: int = Field(2000, ge=1, le=100_000)
    min_samples: int = Field(8, ge=1, le=4096)
    max_samples: int = Field(1024, ge=1, le=4096)
    max_seconds: float = Field(120.0, gt=0, le=3600)
    retry_k: int = Field(0, ge=0, le=50)
    retry_seconds: float = Field(180.0, gt=0, le=3600)


class Gate(_Strict):
    """One CI threshold, evaluated by the server into ``verdict``.

    ``metric`` is read from the report at ``artifacts.<artifact>.optimized.<level>``:
    ``sqnr_db`` / ``cosine`` / ``max_abs_error`` (worst float output SQNR judges), ``mismatch_share`` (worst
    integer, bool or string output: share of its elements that differ from fp32), ``angular_error`` (largest
    mean angular error of a circular output, radians), ``argmax_agreement`` (lowest share of rows whose top class
    is fp32's, over the outputs that are probabilities), ``int8_coverage``,
    ``latency_ratio`` (median latency / fp32 median at the same level), or ``status_ok``
    (the artifact's path ok, or with ``*`` every requested path; its value is the share of ok paths),
    or ``calibration_data_uploaded`` (1 when the uploaded .npz was used, 0 for generated samples).
    Missing data (a failed path, a level not run, an accuracy no output measures) fails a gate; an exact match
    (SQNR ``None``) passes.

    ``relative_to="baseline"`` makes the threshold the baseline's figure plus ``value``
    (``ort_qdq.all.sqnr_db>=baseline-0.5``). ``baseline_values`` holds that figure per artifact;
    whoever resolves the baseline fills it (the API from ``options.baseline``, the client from a
    saved report.json). ``null`` there is an exact match (SQNR without error, as in
    ``numerics.worst_sqnr_db``); an artifact absent from it has no baseline figure and fails.
    """

    # A built-in path, a brought file's name (artifact.<name>), or * (every artifact of the job but fp32).
    artifact: str = Field("*", pattern=r"^(\*|[a-z][a-z0-9_]{0,39})$")
    level: Level = "all"
    metric: Literal["sqnr_db", "cosine", "max_abs_error", "mismatch_share", "angular_error", "argmax_agreement",
                    "int8_coverage", "latency_ratio", "status_ok", "calibration_data_uploaded",
                    "compiles", "same_graphs", "nodes_taken_share"]
    # A gate on a target or platform of options.platforms ("qnn:69.ort_qdq.compiles", "ort:1.22.1.same_graphs",
    # "openvino:cpu.ort_qdq.sqnr_db>=30"): read from platforms.<platform> (service/pipeline/platforms/targets/gates.py).
    # compiles, same_graphs and nodes_taken_share exist only there.
    platform: str | None = Field(None, pattern=r"^(qnn(:[0-9]{1,4})?|openvino:cpu|ort:[0-9]+\.[0-9]+\.[0-9]+|arm64(:[a-z0-9-]+)?)$")
    op: Literal[">=", ">", "<=", "<", "=="] = ">="
    value: float = 1.0
    # latency_ratio only: a failing figure that is marked noisy fails the gate ("fail", the default:
    # CI re-runs), or passes it with the reason in the message ("pass"). A passing one always passes.
    on_noisy: Literal["fail", "pass"] = "fail"
    relative_to: Literal["baseline"] | None = None
    baseline_values: dict[str, float | None] | None = None

    @model_validator(mode="after")
    def _relative_metric(self):
        if self.relative_to and self.metric == "status_ok":
            raise ValueError("status_ok cannot be relative to a baseline")
        return self


# The emulated platforms (service/pipeline/ort/targets.py gives each its QEMU_CPU).
EMULATED_PLATFORMS = ("arm64", "arm64:neoverse-n1", "arm64:i8mm", "arm64:cortex-a53")
# Targets (service/pipeline/platforms/targets/install.py): Qualcomm's HTP through the QNN EP ("qnn" is soc_model
# QNN_DEFAULT_SOC), OpenVINO's CPU plugin, and any ONNX Runtime release `make` installed. Clients and CI files
# use these spellings: keep them.
TARGET_PLATFORM_RE = re.compile(r"^(qnn(:[0-9]{1,4})?|openvino:cpu|ort:[0-9]+\.[0-9]+\.[0-9]+)$")
QNN_DEFAULT_SOC = "69"
# 1.17 and older cannot read IR 10 files (the quantizers write IR 10).
ORT_RELEASE_MIN = (1, 18, 0)


def host_platform_name() -> str:
    """The machine the job runs on, as ``options.platforms`` names it (``platform.machine()``)."""
    return _platform.machine() or "unknown"


class PlatformAccuracyOptions(_Strict):
    """Accuracy on an emulated platform: the eval samples, run on every level graph of every artifact
    within ``budget_seconds`` (one sample each is timed first; as many as fit are then run on all)."""

    enabled: bool = True
    budget_seconds: float = Field(120.0, ge=0, le=3600)


class ComparisonOptions(_Strict):
    # The built-in paths to run. [] runs none: the job compares only the files brought beside the model
    # (multipart ``artifact.<name>`` parts) against fp32, and is refused without any.
    artifacts: list[QuantArtifact] = Field(default_factory=lambda: list(ARTIFACTS))
    tool_presets: ToolPresets = Field(default_factory=ToolPresets)
    # Values for dynamic dims: {"input_name": [1, 3, 224, 224]}; a dim that is already fixed must match.
    input_shapes: dict[str, list[int]] = Field(default_factory=dict)
    input_values: dict[str, InputValues] = Field(default_factory=dict)
    calibration_samples: int = Field(16, ge=1, le=4096)
    eval_samples: int = Field(8, ge=1, le=4096)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    preset: Literal["matched", "ort_defaults"] = "matched"
    pt2e: Pt2eOptions = Field(default_factory=Pt2eOptions)
    ort: OrtQuantOptions = Field(default_factory=OrtQuantOptions)
    # ORT session config entries set on every session that measures the files on this machine (level graphs,
    # accuracy, latency, profile, advice's re-runs): {"session.qdqisint8allowed": "1"}. Keys of
    # ORT_SESSION_ENTRIES only. What re-runs a job with an advice entry's session change (its recipe.options).
    ort_session: dict[str, str] = Field(default_factory=dict)
    levels: list[Level] = Field(default_factory=lambda: list(LEVELS))
    depth: Depth = "standard"
    # The levels whose latency is timed (depth "full": every level); the others say "not timed".
    # Default: ORT's default level, the one a deployment runs (the highest of ``levels`` when they leave
    # "all" out). Accuracy is measured at every level of ``levels`` whatever this says.
    latency_levels: list[Level] = Field(default_factory=lambda: ["all"])
    latency: LatencyOptions = Field(default_factory=LatencyOptions)
    attribution: bool = False
    advice: AdviceOptions = Field(default_factory=AdviceOptions)
    extras: ExtrasOptions = Field(default_factory=ExtrasOptions)
    layers: LayersOptions = Field(default_factory=LayersOptions)
    gates: list[Gate] = Field(default_factory=list)
    # Id of an earlier comparison whose figures relative gates compare with; the API resolves it
    # into each relative gate's ``baseline_values`` before the job runs.
    baseline: str | None = Field(None, pattern=r"^[0-9a-f]{32}$")
    # Where ORT's graphs are made: None = the machine the job runs on. An emulated platform (arm64 under
    # qemu-user, docs/CONTRACTS.md "Platforms") adds level graphs and accuracy, never latency.
    platforms: list[str] | None = None
    platform_accuracy: PlatformAccuracyOptions = Field(default_factory=lambda: PlatformAccuracyOptions())

    @field_validator("platforms")
    @classmethod
    def _known_platforms(cls, v):
        if v is None:
            return v
        if not v or len(set(v)) != len(v):
            raise ValueError("give at least one platform, each once (leave the key out for this machine)")
        known = (host_platform_name(), *EMULATED_PLATFORMS)
        unknown = [p for p in v if p not in known and not TARGET_PLATFORM_RE.match(p)]
        if unknown:
            raise ValueError(f"unknown platform(s) {', '.join(unknown)}; known: {', '.join(known)}, qnn, "
                             "qnn:<soc_model>, openvino:cpu, ort:<version>")
        old = [p for p in v if p.startswith("ort:") and tuple(int(x) for x in p[4:].split(".")) < ORT_RELEASE_MIN]
        if old:
            raise ValueError(f"{', '.join(old)}: ONNX Runtime before 1.18 cannot read IR 10 files, which the "
                             "quantizers write; ask for ort:1.18.0 or later")
        return v

    @field_validator("ort_session")
    @classmethod
    def _known_session_entries(cls, v):
        unknown = sorted(set(v) - set(ORT_SESSION_ENTRIES))
        if unknown:
            raise ValueError(f"quantcompare does not set the ORT session config entr{'ies' if len(unknown) > 1 else 'y'} "
                             f"{', '.join(unknown)}; allowed keys: {_allowed_entries()}")
        bad = sorted(k for k, val in v.items() if val not in ORT_SESSION_ENTRIES[k])
        if bad:
            raise ValueError(f"{', '.join(f'{k}={v[k]}' for k in bad)}: allowed values: {_allowed_entries()}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _advice_budget_is_the_extras_budget(cls, data):
        """``advice.budget_share`` / ``advice.budget_seconds`` (before issue 47) are read as the extras'
        budget, which advice now shares with the per-tensor table: a CI file written then still runs."""
        advice = data.get("advice") if isinstance(data, dict) else None
        if not isinstance(advice, dict) or not ({"budget_share", "budget_seconds"} & advice.keys()):
            return data
        advice = dict(advice)
        extras = dict(data.get("extras") or {})
        for old, new in (("budget_share", "share"), ("budget_seconds", "seconds")):
            if old in advice:
                value = advice.pop(old)
                if value is not None:
                    extras.setdefault(new, value)
        return {**data, "advice": advice, "extras": extras}

    @model_validator(mode="before")
    @classmethod
    def _latency_level_among_levels(cls, data):
        """latency_levels left out while ``levels`` leaves out "all": the highest level run is timed."""
        if isinstance(data, dict) and "latency_levels" not in data and isinstance(data.get("levels"), list):
            run = [lv for lv in LEVELS if lv in data["levels"]]
            if run and "all" not in run:
                data = {**data, "latency_levels": [run[-1]]}
        return data

    @model_validator(mode="after")
    def _latency_levels_are_run(self):
        missing = [lv for lv in self.latency_levels if lv not in self.levels]
        if missing:
            raise ValueError(f"latency_levels {missing} are not among the levels run ({self.levels}): add them to "
                             "levels, or leave them out of latency_levels")
        return self

    @model_validator(mode="after")
    def _gates_are_measured(self):
        """A gate on a figure this depth (or latency_levels) does not measure would fail for missing data:
        refused here, naming the option that measures it."""
        timed = timed_levels(self)
        for gate in self.gates:
            name = f"{gate.artifact}.{gate.level}.{gate.metric}"
            if self.depth == "structure" and (gate.metric in ACCURACY_METRICS or gate.metric == "latency_ratio"):
                raise ValueError(f"gate {name} reads a figure that depth 'structure' does not measure: set depth "
                                 "'standard' (or leave depth out)")
            if gate.metric == "latency_ratio" and self.latency.enabled and gate.level not in timed:
                raise ValueError(f"gate {name} reads the latency at level {gate.level!r}, which is not timed "
                                 f"(latency_levels {self.latency_levels}): add {gate.level!r} to latency_levels, "
                                 "or set depth 'full'")
        return self

    @model_validator(mode="after")
    def _relative_gates_have_a_baseline(self):
        for gate in self.gates:
            if gate.relative_to and gate.baseline_values is None and self.baseline is None:
                raise ValueError(
                    "a gate relative to the baseline needs one: set options.baseline to the id of an earlier "
                    "comparison (or pass --baseline report.json to quantcompare-client check)"
                )
        return self

    @field_validator("artifacts")
    @classmethod
    def _unique(cls, v):
        if len(set(v)) != len(v):
            raise ValueError("entries must be unique")
        return v

    @field_validator("levels", "latency_levels")
    @classmethod
    def _unique_nonempty(cls, v):
        if not v:  # nothing would be made or measured, and a job without gates would read "passed"
            raise ValueError("give at least one (leave the key out for all of them)")
        if len(set(v)) != len(v):
            raise ValueError("entries must be unique")
        return v

    @field_validator("input_shapes")
    @classmethod
    def _positive_dims(cls, v):
        for name, dims in v.items():
            if not dims or any(d < 1 or d > 1_000_000 for d in dims):
                raise ValueError(f"input_shapes[{name!r}]: every dim must be between 1 and 1000000")
        return v


def timed_levels(options: ComparisonOptions) -> list[str]:
    """The levels whose latency this job times, in ORT's order: ``latency_levels`` (every level at depth
    "full"); none at depth "structure" or with ``latency.enabled`` false."""
    if options.depth == "structure" or not options.latency.enabled:
        return []
    wanted = options.levels if options.depth == "full" else options.latency_levels
    return [lv for lv in LEVELS if lv in options.levels and lv in wanted]


def measures_accuracy(options: ComparisonOptions) -> bool:
    """Evaluation runs (numerics at every level, the per-tensor table, advice): every depth but structure."""
    return options.depth != "structure"


def layers_by_level(options: ComparisonOptions) -> bool:
    """The per-tensor table's SQNR at every level: ``layers.by_level``, or depth "full"."""
    return options.layers.by_level or options.depth == "full"


def resolved_ort_settings(options: ComparisonOptions) -> dict[str, Any]:
    """The exact ``quantize_static`` settings for a preset plus the user's overrides.

    ``matched`` mirrors torchao's XNNPACK symmetric config: int8 activations (asymmetric),
    int8 weights symmetric, per-channel unless PT2E was asked for per-tensor, MinMax-free
    histogram calibration cannot be mirrored exactly (ORT has no HistogramObserver), so
    MinMax is used and the report says so.
    """
    o = options.ort
    if options.preset == "matched":
        base = {
            "calibrate_method": "minmax",
            "per_channel": options.pt2e.per_channel,
            "activation_type": "int8",
            "weight_type": "int8",
            "reduce_range": False,
            "extra_options": {"WeightSymmetric": True, "ActivationSymmetric": False},
        }
    else:  # ORT's own defaults for quantize_static
        base = {
            "calibrate_method": "minmax",
            "per_channel": False,
            "activation_type": "int8",
            "weight_type": "int8",
            "reduce_range": False,
            "extra_options": {},
        }
    for key in ("calibrate_method", "per_channel", "activation_type", "weight_type", "reduce_range"):
        val = getattr(o, key)
        if val is not None:
            base[key] = val
    base["extra_options"] = {**base["extra_options"], **o.extra_options}
    base["op_types_to_quantize"] = o.op_types_to_quantize
    base["nodes_to_exclude"] = o.nodes_to_exclude
    base["pre_process"] = o.pre_process
    return base
