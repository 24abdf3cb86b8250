"""Typed, read-only views over the report JSON and the job envelope.

The JSON is the contract (``schema_version`` says which); these classes name the parts people
look at and keep the rest reachable through ``.raw``. Fields the server has not filled (a path
that failed, a level without latency) are ``None`` rather than missing attributes, so notebook
code can test for them. Unknown keys are kept in ``.raw``, never refused: a newer server must
not break an older client.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from ._headline import headline_html
from ._layers import Layers
from ._platforms import Platform, platforms_from
from ._svg import bar_chart

__all__ = [
    "Report",
    "Job",
    "Progress",
    "Artifact",
    "ArtifactFile",
    "PathError",
    "Inventory",
    "OptimizedLevel",
    "Numerics",
    "OutputNumerics",
    "Latency",
    "LevelDiff",
    "Rewrite",
    "Decision",
    "Lint",
    "GateResult",
    "Verdict",
    "ModelInfo",
    "ArtifactLink",
    "Example",
]

LEVELS = ("disable_all", "basic", "extended", "layout", "all")


def _d(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _f(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _sqnr(d: Mapping[str, Any], key: str) -> Optional[float]:
    # The server writes null for an exactly-zero error (infinite SQNR); JSON has no Infinity.
    if key in d and d[key] is None:
        return math.inf
    return _f(d.get(key))


def _when(value: Any) -> Optional[datetime]:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# ---- per-level results ------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputNumerics:
    name: str
    sqnr_db: Optional[float]
    cosine: Optional[float]
    max_abs_error: Optional[float]
    # "elementwise" (a float output), "exact" (integer, bool or string: labels, indices; it has
    # mismatch_share and no SQNR) or "shape" (its rows follow a selection such as NonMaxSuppression)
    compared: str = "elementwise"
    mismatch_share: Optional[float] = None
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OutputNumerics":
        d = _d(d)
        compared = str(d.get("compared") or "elementwise")
        sqnr = _sqnr(d, "sqnr_db") if compared == "elementwise" else None  # null is not "exact" there
        return cls(str(d.get("name", "")), sqnr, _f(d.get("cosine")), _f(d.get("max_abs_error")), compared,
                   _f(d.get("mismatch_share")), d)


@dataclass(frozen=True)
class Numerics:
    """Accuracy against fp32 at one level: ``worst_sqnr_db``, ``worst_cosine`` and
    ``worst_max_abs_error`` over the float outputs (None when there is none), ``worst_mismatch_share``
    over the integer ones (labels, indices: the share of elements that differ from fp32)."""

    worst_sqnr_db: Optional[float]
    worst_cosine: Optional[float]
    worst_max_abs_error: Optional[float]
    outputs: List[OutputNumerics] = field(default_factory=list)
    worst_mismatch_share: Optional[float] = None
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Numerics":
        d = _d(d)
        outputs = [OutputNumerics.from_dict(o) for o in d.get("outputs") or []]
        # No float output compared (every one is a label or follows a selection): null is "none", not "exact".
        none_compared = d.get("elementwise_outputs") == 0 and bool(outputs)
        return cls(
            None if none_compared else _sqnr(d, "worst_sqnr_db"), _f(d.get("worst_cosine")),
            _f(d.get("worst_max_abs_error")), outputs, _f(d.get("worst_mismatch_share")), d,
        )


@dataclass(frozen=True)
class Latency:
    median_ms: Optional[float]
    p90_ms: Optional[float] = None
    runs: Optional[int] = None
    intra_op_threads: Optional[int] = None
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Latency":
        d = _d(d)
        return cls(_f(d.get("median_ms")), _f(d.get("p90_ms")), d.get("runs"), d.get("intra_op_threads"), d)


@dataclass(frozen=True)
class Rewrite:
    """One fusion or rewrite ORT applied between two levels."""

    summary: str
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def __str__(self) -> str:
        return self.summary


@dataclass(frozen=True)
class LevelDiff:
    """What changed against the previous level."""

    rewrites: List[Rewrite]
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LevelDiff":
        d = _d(d)
        rewrites = []
        for r in d.get("rewrites") or []:
            rewrites.append(Rewrite(str(r.get("summary", r)) if isinstance(r, dict) else str(r), _d(r)))
        return cls(rewrites, d)


@dataclass(frozen=True)
class UnfusedNode:
    """A compute node ORT runs in float at one level, and the first ORT condition it fails."""

    node: str
    op_type: str
    blocker: str  # stable code (docs/report.md, "Why ORT left a node in float")
    detail: str
    fix: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "UnfusedNode":
        d = _d(d)
        return cls(*(str(d.get(k, "")) for k in ("node", "op_type", "blocker", "detail", "fix")))


@dataclass(frozen=True)
class OptimizedLevel:
    """The graph ORT made of one artifact at one ``GraphOptimizationLevel``."""

    level: str
    op_histogram: Dict[str, int]
    int8_coverage: Optional[float]
    numerics: Optional[Numerics]
    latency: Optional[Latency]
    diff: Optional[LevelDiff]
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    unfused: List[UnfusedNode] = field(default_factory=list)  # why each float compute node stayed float

    @classmethod
    def from_dict(cls, level: str, d: Mapping[str, Any]) -> "OptimizedLevel":
        d = _d(d)
        return cls(
            level=str(d.get("level", level)),
            op_histogram={str(k): int(v) for k, v in _d(d.get("op_histogram")).items()},
            int8_coverage=_f(d.get("int8_coverage")),
            numerics=Numerics.from_dict(d["numerics"]) if isinstance(d.get("numerics"), dict) else None,
            latency=Latency.from_dict(d["latency"]) if isinstance(d.get("latency"), dict) else None,
            diff=LevelDiff.from_dict(d["diff"]) if isinstance(d.get("diff"), dict) else None,
            raw=d,
            unfused=[UnfusedNode.from_dict(u) for u in d.get("unfused") or [] if isinstance(u, dict)],
        )

    @property
    def profile(self) -> Optional[Profile]:
        """Where the time goes at this level (None where latency was not timed)."""
        p = self.raw.get("profile")
        return Profile.from_dict(p) if isinstance(p, dict) else None

    @property
    def node_count(self) -> int:
        n = self.raw.get("node_count")
        return int(n) if isinstance(n, int) and n else sum(self.op_histogram.values())

    @property
    def error(self) -> Optional[str]:
        """Set when ORT could not create or run a session at this level."""
        return self.raw.get("error")


# ---- per-artifact results -----------------------------------------------------------------------


@dataclass(frozen=True)
class AdviceFigures:
    int8_coverage: Optional[float]
    latency_ms: Optional[float]  # median of the runs timed alternately with the other session
    sqnr_db: Optional[float]  # worst output vs fp32; None = identical outputs
    level: Optional[str]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "AdviceFigures":
        d = _d(d)
        return cls(_f(d.get("int8_coverage")), _f(d.get("latency_ms")), _f(d.get("sqnr_db")), d.get("level"))


@dataclass(frozen=True)
class Recipe:
    """How to make an advice entry's file and session outside the service. ``print(recipe)`` shows the
    Python to paste (it reads the job's ``fp32.onnx`` and a ``calibration.npz``); in a notebook it renders
    as a code block."""

    tool: Optional[str]  # "onnxruntime" | "torchao" | None: no recipe for the tool that made the artifact
    python: str
    quantize_static: Optional[Dict[str, Any]]  # its keyword arguments, enum members by name
    pt2e: Optional[Dict[str, Any]]
    session: Dict[str, str]  # ORT session config entries
    options: Optional[Dict[str, Any]]  # the job options that re-run the job with the change
    exact: bool  # every step is a public call: ``python`` makes the candidate's file
    note: Optional[str]
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Recipe":
        d = _d(d)
        qs, pt = d.get("quantize_static"), d.get("pt2e")
        return cls(tool=d.get("tool"), python=str(d.get("python") or ""),
                   quantize_static=dict(qs) if isinstance(qs, dict) else None, pt2e=dict(pt) if isinstance(pt, dict) else None,
                   session={str(k): str(v) for k, v in _d(d.get("session")).items()},
                   options=dict(d["options"]) if isinstance(d.get("options"), dict) else None,
                   exact=bool(d.get("exact")), note=d.get("note"), raw=d)

    def __str__(self) -> str:
        return self.python

    def _repr_html_(self) -> str:
        return f"<pre><code class=\"language-python\">{html.escape(self.python)}</code></pre>"


@dataclass(frozen=True)
class ProfiledNode:
    node: str
    op_type: str
    ms: float
    share: float
    kernel: Optional[str]  # "s8s8", "u8s8", "f32" as ORT's trace shows the operands


@dataclass(frozen=True)
class Profile:
    """One run under ORT's profiler, outside the timed runs: where the time goes at one level."""

    total_ms: Optional[float]
    by_op_type: Dict[str, float]
    by_class: Dict[str, float]  # int8 kernels, float kernels, Q/DQ, layout, other
    top_nodes: List[ProfiledNode]
    overhead: Optional[float]  # the profiled run / the timed median - 1
    where_it_loses: Optional[str]  # vs fp32 at this level, when slower
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Profile":
        d = _d(d)
        nodes = [ProfiledNode(str(n.get("node", "")), str(n.get("op_type", "")), float(n.get("ms") or 0.0),
                              float(n.get("share") or 0.0), n.get("kernel"))
                 for n in d.get("top_nodes") or [] if isinstance(n, dict)]
        return cls(total_ms=_f(d.get("total_ms")), by_op_type={str(k): float(v) for k, v in _d(d.get("by_op_type")).items()},
                   by_class={str(k): float(v) for k, v in _d(d.get("by_class")).items()}, top_nodes=nodes,
                   overhead=_f(d.get("overhead")), where_it_loses=d.get("where_it_loses"), raw=d)


@dataclass(frozen=True)
class Advice:
    """A change the blockers point to, re-run in the job: ``before``/``after`` are measured
    (None when the budget ran out before it was re-run; ``reason`` says so)."""

    artifact: str
    change: Dict[str, Any]  # the options to set, e.g. {"ort": {"activation_type": "uint8"}}
    reason: str
    adopted: bool
    blocked_nodes: int
    before: Optional[AdviceFigures]
    after: Optional[AdviceFigures]
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def recipe(self) -> Optional[Recipe]:
        """How to make this change outside the service (None from a server that predates recipes)."""
        r = self.raw.get("recipe")
        return Recipe.from_dict(r) if isinstance(r, dict) else None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Advice":
        d = _d(d)
        m = d.get("measured") if isinstance(d.get("measured"), dict) else None
        return cls(artifact=str(d.get("artifact", "")), change=_d(d.get("change")), reason=str(d.get("reason", "")),
                   adopted=bool(d.get("adopted", True)), blocked_nodes=int(d.get("blocked_nodes") or 0),
                   before=AdviceFigures.from_dict(m["before"]) if m and isinstance(m.get("before"), dict) else None,
                   after=AdviceFigures.from_dict(m["after"]) if m and isinstance(m.get("after"), dict) else None,
                   raw=d)


@dataclass(frozen=True)
class PathError:
    stage: str
    type: str
    message: str
    hint: Optional[str] = None
    # the stable code to switch on (path_skipped, ort_quantizer_failed, out_of_memory, path_failed, ...);
    # None from a server that predates it
    code: Optional[str] = None

    def __str__(self) -> str:
        return f"{self.stage}: {self.type}: {self.message}" + (f" (hint: {self.hint})" if self.hint else "")


@dataclass(frozen=True)
class ArtifactFile:
    path: str
    size: Optional[int]
    sha256: Optional[str]
    producer: str
    opset_imports: Dict[str, int]
    node_count: Optional[int]
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ArtifactFile":
        d = _d(d)
        producer = " ".join(str(p) for p in (d.get("producer_name"), d.get("producer_version")) if p)
        return cls(str(d.get("path", "")), d.get("size"), d.get("sha256"), producer,
                   dict(_d(d.get("opset_imports"))), d.get("node_count"), d)


@dataclass(frozen=True)
class Inventory:
    """What one quantizer wrote into its file (before ORT touches it)."""

    format: Optional[str]
    quantize_linear: int
    dequantize_linear: int
    weights: Optional[str]
    bias_summary: Optional[str]
    ops_quantized: Dict[str, int]
    ops_float: Dict[str, int]
    int8_kernels_in_file: Dict[str, int]
    activation_dtypes: List[str]
    weight_dtypes: List[str]
    tensors: List[Dict[str, Any]] = field(repr=False, default_factory=list)
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Inventory":
        d = _d(d)
        return cls(
            format=d.get("format"),
            quantize_linear=int(d.get("quantize_linear") or 0),
            dequantize_linear=int(d.get("dequantize_linear") or 0),
            weights=d.get("weights"),
            bias_summary=d.get("bias_summary"),
            ops_quantized=dict(_d(d.get("ops_quantized"))),
            ops_float=dict(_d(d.get("ops_float"))),
            int8_kernels_in_file=dict(_d(d.get("int8_kernels_in_file"))),
            activation_dtypes=list(d.get("activation_dtypes") or []),
            weight_dtypes=list(d.get("weight_dtypes") or []),
            tensors=list(d.get("tensors") or []),
            raw=d,
        )


@dataclass(frozen=True)
class Artifact:
    """One path from the fp32 model: its status, its file, what it holds, and what ORT made of it."""

    name: str
    status: str
    error: Optional[PathError]
    file: Optional[ArtifactFile]
    quantization: Optional[Inventory]
    optimized: Dict[str, OptimizedLevel]
    tool: Dict[str, Any] = field(repr=False, default_factory=dict)
    seconds: Optional[float] = None
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> "Artifact":
        d = _d(d)
        err = _d(d.get("error"))
        return cls(
            name=str(d.get("name", name)),
            status=str(d.get("status", "unknown")),
            error=PathError(str(err.get("stage", "")), str(err.get("type", "")), str(err.get("message", "")),
                            err.get("hint"), err.get("code")) if err else None,
            file=ArtifactFile.from_dict(d["file"]) if isinstance(d.get("file"), dict) else None,
            quantization=Inventory.from_dict(d["quantization"]) if isinstance(d.get("quantization"), dict) else None,
            optimized={lv: OptimizedLevel.from_dict(lv, v) for lv, v in _d(d.get("optimized")).items()},
            tool=_d(d.get("tool")),
            seconds=_f(d.get("seconds")),
            raw=d,
        )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def level(self, level: str = "all") -> Optional[OptimizedLevel]:
        return self.optimized.get(level)

    def __repr__(self) -> str:
        if not self.ok:
            return f"<Artifact {self.name} {self.status}: {self.error or 'no error recorded'}>"
        levels = ", ".join(self.optimized) or "no levels"
        fmt = self.quantization.format if self.quantization else None
        return f"<Artifact {self.name} ok{' ' + fmt if fmt else ''} levels=[{levels}]>"


# ---- report-wide ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A row like "bias quantized to int32": where each artifact decides it."""

    decision: str
    where: Dict[str, str]
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


@dataclass(frozen=True)
class Lint:
    code: str
    message: str
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


@dataclass(frozen=True)
class GateResult:
    gate: str
    passed: bool
    actual: Optional[float]
    message: str
    # Gates relative to a baseline: the deciding artifact's baseline figure and actual - baseline.
    baseline: Optional[float] = None
    delta: Optional[float] = None


@dataclass(frozen=True)
class Verdict:
    passed: bool
    gates: List[GateResult]
    failures: List[str]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Verdict":
        d = _d(d)
        gates = [GateResult(str(g.get("gate", "")), bool(g.get("passed")), _f(g.get("actual")), str(g.get("message", "")),
                            _f(g.get("baseline")), _f(g.get("delta")))
                 for g in d.get("gates") or [] if isinstance(g, dict)]
        return cls(bool(d.get("passed")), gates, [str(f) for f in d.get("failures") or []])

    def __bool__(self) -> bool:
        return self.passed


@dataclass(frozen=True)
class ModelInfo:
    name: str
    sha256: str
    format: str
    node_count: Optional[int]
    inputs: List[Dict[str, Any]] = field(repr=False, default_factory=list)
    outputs: List[Dict[str, Any]] = field(repr=False, default_factory=list)
    opset_imports: Dict[str, int] = field(repr=False, default_factory=dict)
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelInfo":
        d = _d(d)
        return cls(str(d.get("name", "")), str(d.get("sha256", "")), str(d.get("format", "")), d.get("node_count"),
                   list(d.get("inputs") or []), list(d.get("outputs") or []), dict(_d(d.get("opset_imports"))), d)


class Report:
    """A finished comparison. ``report.summary()`` prints a table; Jupyter renders ``_repr_html_``.

    >>> report.artifacts["ort_qdq"].optimized["all"].numerics.worst_sqnr_db
    >>> report.sqnr_db("pt2e_qdq", "extended")
    >>> report.latency_ratio("ort_qdq")          # median / fp32 median at the same level
    >>> report.verdict.passed
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        if not isinstance(data, Mapping):
            raise TypeError(f"Report wants the report JSON object, got {type(data).__name__}")
        self.raw: Dict[str, Any] = dict(data)
        self.id: Optional[str] = self.raw.get("id")
        self.schema_version: Optional[str] = self.raw.get("schema_version")
        self.created_at: Optional[datetime] = _when(self.raw.get("created_at"))
        self.model = ModelInfo.from_dict(_d(self.raw.get("model")))
        self.artifacts: Dict[str, Artifact] = {
            name: Artifact.from_dict(name, a) for name, a in _d(self.raw.get("artifacts")).items()
        }
        self.decisions: List[Decision] = [
            Decision(str(r.get("decision", "")), {str(k): str(v) for k, v in _d(r.get("where")).items()}, r)
            for r in self.raw.get("decisions") or [] if isinstance(r, dict)
        ]
        self.lints: List[Lint] = [
            Lint(str(r.get("code", "")), str(r.get("message", "")), r)
            for r in self.raw.get("lints") or [] if isinstance(r, dict)
        ]
        self.agreement: List[Dict[str, Any]] = list(self.raw.get("agreement") or [])
        # Measured advice (issue 14): proposed changes, and the ones measurement refuted.
        self.advice: List[Advice] = [Advice.from_dict(a) for a in self.raw.get("advice") or [] if isinstance(a, dict)]
        self.advice_refuted: List[Advice] = [
            Advice.from_dict(a) for a in self.raw.get("advice_refuted") or [] if isinstance(a, dict)
        ]
        # The candidates the advice budget left out, each with the reason (issue 39).
        self.advice_not_run: List[Advice] = [
            Advice.from_dict(a) for a in self.raw.get("advice_not_run") or [] if isinstance(a, dict)
        ]
        self.verdict = Verdict.from_dict(_d(self.raw.get("verdict")))
        # Which file to ship and one card per artifact, as the server decided them (issue 52); None in a
        # partial report or one from an older server.
        self.headline: Optional[Dict[str, Any]] = _d(self.raw.get("headline")) or None
        # The report as it comes: a running job's report holds the sections finished so far (its figures
        # do not change later); the verdict comes with the finished report (``partial`` false).
        self.partial: bool = bool(self.raw.get("partial", False))
        self.sections_done: List[str] = [str(x) for x in self.raw.get("sections_done") or []]
        self.not_measured: List[Dict[str, Any]] = [x for x in self.raw.get("not_measured") or [] if isinstance(x, dict)]
        self.timings: Dict[str, float] = {k: float(v) for k, v in _d(self.raw.get("timings")).items() if _f(v) is not None}
        self.options: Dict[str, Any] = _d(self.raw.get("options"))
        self.environment: Dict[str, Any] = _d(self.raw.get("environment"))
        self.samples: Dict[str, Any] = _d(self.raw.get("samples"))
        # Per-tensor error (issue 15); None from a server that does not measure it or when it is off.
        # (a bare list of rows is read as {"rows": [...]}, as to_pandas("layers") does)
        raw_layers = self.raw.get("layers")
        if isinstance(raw_layers, list):
            raw_layers = {"rows": raw_layers}
        self.layers: Optional[Layers] = Layers(raw_layers) if isinstance(raw_layers, dict) else None
        # Other platforms (issue 41: arm64 as emulated ORT), side by side with this report's artifacts.
        self.platforms: Dict[str, Platform] = platforms_from(self.raw.get("platforms"))

    # -- lookups --------------------------------------------------------------------------------

    def level(self, artifact: str, level: str = "all") -> Optional[OptimizedLevel]:
        art = self.artifacts.get(artifact)
        return art.optimized.get(level) if art is not None else None

    def _worst(self, artifact: str, level: str, attr: str) -> Optional[float]:
        lv = self.level(artifact, level)
        return getattr(lv.numerics, attr) if lv is not None and lv.numerics is not None else None

    def sqnr_db(self, artifact: str, level: str = "all") -> Optional[float]:
        return self._worst(artifact, level, "worst_sqnr_db")

    def cosine(self, artifact: str, level: str = "all") -> Optional[float]:
        return self._worst(artifact, level, "worst_cosine")

    def max_abs_error(self, artifact: str, level: str = "all") -> Optional[float]:
        return self._worst(artifact, level, "worst_max_abs_error")

    def int8_coverage(self, artifact: str, level: str = "all") -> Optional[float]:
        lv = self.level(artifact, level)
        return lv.int8_coverage if lv is not None else None

    def median_ms(self, artifact: str, level: str = "all") -> Optional[float]:
        lv = self.level(artifact, level)
        return lv.latency.median_ms if lv is not None and lv.latency is not None else None

    def latency_ratio(self, artifact: str, level: str = "all") -> Optional[float]:
        """Median latency over fp32's median at the same level (below 1: faster than fp32)."""
        mine, base = self.median_ms(artifact, level), self.median_ms("fp32", level)
        if mine is None or not base:
            return None
        return mine / base

    @property
    def levels(self) -> List[str]:
        seen: List[str] = []
        for art in self.artifacts.values():
            for lv in art.optimized:
                if lv not in seen:
                    seen.append(lv)
        return sorted(seen, key=lambda lv: LEVELS.index(lv) if lv in LEVELS else len(LEVELS))

    # -- tables -----------------------------------------------------------------------------------

    def to_pandas(self, kind: str = "levels") -> Any:
        """A DataFrame of one table: ``"levels"``, ``"decisions"``, ``"gates"`` or ``"layers"``.

        Needs pandas (``pip install 'quantcompare-client[pandas]'``). ``levels`` has one row per
        artifact x level (an exact SQNR is ``inf``); ``layers`` one row per fp32 tensor x artifact,
        and raises ``ValueError`` when the report has no per-tensor table.
        """
        from ._frames import frame_from_report

        return frame_from_report(self, kind)

    def charts_svg(self) -> str:
        """SQNR and latency per level as two inline SVG bar charts (no scripts), like the report page."""
        levels = self.levels
        quant = [n for n in self.artifacts if n != "fp32"]
        sqnr = bar_chart(levels, {n: [self.sqnr_db(n, lv) for lv in levels] for n in quant},
                         title="SQNR vs fp32 (worst output; higher is better)", unit="dB")
        latency = bar_chart(levels, {n: [self.median_ms(n, lv) for lv in levels] for n in self.artifacts},
                            title="Latency per run (median; lower is better)", unit="ms")
        return f'<div style="display:flex;flex-wrap:wrap;gap:18px">{sqnr}{latency}</div>'

    # -- serialisation --------------------------------------------------------------------------

    def to_dict(self) -> Dict[str, Any]:
        return self.raw

    def to_json(self, *, indent: Optional[int] = 2) -> str:
        return json.dumps(self.raw, indent=indent)

    def save(self, path: Union[str, Path]) -> Path:
        path = Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Report":
        """Read a saved ``report.json`` (or a whole job envelope, whose ``report`` is taken)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("report"), dict) and "artifacts" not in data:
            data = data["report"]
        return cls(data)

    # -- display --------------------------------------------------------------------------------

    def rows(self, level: str = "all") -> List[Dict[str, Any]]:
        """One row per artifact at ``level``: the numbers ``summary()`` and the HTML table show."""
        out = []
        for name, art in self.artifacts.items():
            lv = art.optimized.get(level)
            q = art.quantization
            row: Dict[str, Any] = {
                "artifact": name,
                "status": art.status,
                "format": q.format if q else None,
                "bias": q.bias_summary if q else None,
                "nodes": lv.node_count if lv else None,
                "int8_coverage": lv.int8_coverage if lv else None,
                "sqnr_db": lv.numerics.worst_sqnr_db if lv and lv.numerics else None,
                "cosine": lv.numerics.worst_cosine if lv and lv.numerics else None,
                "max_abs_error": lv.numerics.worst_max_abs_error if lv and lv.numerics else None,
                "median_ms": lv.latency.median_ms if lv and lv.latency else None,
                "latency_ratio": self.latency_ratio(name, level) if name != "fp32" else None,
                "error": str(art.error) if art.error else None,
            }
            out.append(row)
        return out

    def summary_text(self, level: str = "all") -> str:
        head = self._headline()
        cols = [("artifact", "artifact", "s"), ("status", "status", "s"), ("format", "format", "s"),
                ("bias", "bias", "s"), ("nodes", "nodes", "d"), ("int8", "int8_coverage", "%"),
                ("sqnr_db", "sqnr_db", ".1f"), ("cosine", "cosine", ".5f"), ("max_abs", "max_abs_error", ".3g"),
                ("ms", "median_ms", ".3f"), ("x fp32", "latency_ratio", ".2f")]
        rows = self.rows(level)
        table = [[title for title, _, _ in cols]]
        for r in rows:
            table.append([_fmt(r[key], spec) for _, key, spec in cols])
        widths = [max(len(line[i]) for line in table) for i in range(len(cols))]
        lines = [head]
        if self.made_up_data:
            lines.append("!! " + self.made_up_data)
        lines.append(f"level: {level}")
        for line in table:
            lines.append("  ".join(cell.ljust(w) if i < 4 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths))).rstrip())
        for r in rows:
            if r["error"]:
                lines.append(f"  {r['artifact']} {r['status']}: {_clip(r['error'], 160)}")
        lines.append(self._verdict_line())
        for g in self.verdict.gates:
            lines.append(f"  {'PASS' if g.passed else 'FAIL'}  {g.gate}  {_clip(g.message, 120)}")
        if self.lints:
            lines.append(f"lints: {len(self.lints)} ({', '.join(sorted({lint.code for lint in self.lints}))})")
        return "\n".join(lines)

    @property
    def made_up_data(self) -> Optional[str]:
        """A warning when no calibration .npz was uploaded (the numbers describe generated samples), else None."""
        if self.samples.get("source") != "generated":
            return None
        made = ", ".join(f"{k}: {v}" for k, v in _d(self.samples.get("generators")).items()) or "generated"
        return (f"MADE-UP DATA: no calibration .npz was uploaded; scales and accuracy describe generated samples "
                f"({made}), not the model's real inputs")

    def summary(self, level: str = "all", *, file: Any = None) -> None:
        """Print a compact table: one row per artifact at ``level``, then the verdict."""
        print(self.summary_text(level), file=file)

    def __str__(self) -> str:
        return self.summary_text()

    def _headline(self) -> str:
        bits = [f"quantcompare report {self.id or '(no id)'}", f"model {self.model.name or '?'} ({self.model.format or '?'})"]
        if self.model.sha256:
            bits.append(f"sha256 {self.model.sha256[:12]}")
        versions = _d(self.environment.get("versions"))
        if versions:
            bits.append(" ".join(f"{k} {versions[k]}" for k in ("torch", "onnxruntime") if k in versions))
        return " · ".join(b for b in bits if b)

    def _verdict_line(self) -> str:
        if self.partial:
            return f"verdict: RUNNING (sections done: {', '.join(self.sections_done) or 'none'})"
        n = len(self.verdict.gates)
        ok = sum(g.passed for g in self.verdict.gates)
        word = "PASSED" if self.verdict.passed else "FAILED"
        return f"verdict: {word}" + (f" ({ok}/{n} gates)" if n else " (no gates)")

    def __repr__(self) -> str:
        statuses = ", ".join(f"{n}={a.status}" for n, a in self.artifacts.items())
        return (f"<Report {self.id or '(no id)'} model={self.model.name!r} [{statuses}] "
                f"verdict={'running' if self.partial else 'passed' if self.verdict.passed else 'failed'}>")

    def _repr_html_(self) -> str:
        level = "all" if "all" in self.levels or not self.levels else self.levels[-1]
        e = html.escape
        cols = [("artifact", "artifact", "s"), ("status", "status", "s"), ("format", "format", "s"),
                ("bias", "bias", "s"), ("nodes", "nodes", "d"), ("int8 coverage", "int8_coverage", "%"),
                ("SQNR dB", "sqnr_db", ".1f"), ("cosine", "cosine", ".5f"), ("max abs err", "max_abs_error", ".3g"),
                ("median ms", "median_ms", ".3f"), ("× fp32", "latency_ratio", ".2f")]
        parts = [
            '<div class="quantcompare-report">',
            f"<p><b>{e(self._headline())}</b></p>",
            (f'<p style="background:#fff3cd;border:2px solid #d39e00;padding:6px;font-weight:600">'
             f"{e(self.made_up_data)}</p>") if self.made_up_data else "",
            headline_html(self.headline),
            f"<table><caption>level <code>{e(level)}</code></caption><thead><tr>",
            "".join(f"<th>{e(t)}</th>" for t, _, _ in cols),
            "</tr></thead><tbody>",
        ]
        for r in self.rows(level):
            colour = "" if r["status"] == "ok" else ' style="color:#b00020"'
            cells = []
            for _, key, spec in cols:
                text = _fmt(r[key], spec)
                title = f' title="{e(r["error"])}"' if key == "status" and r["error"] else ""
                align = ' style="text-align:right"' if spec not in ("s",) else ""
                cells.append(f"<td{align}{title}>{e(text)}</td>")
            parts.append(f"<tr{colour}>{''.join(cells)}</tr>")
        parts.append("</tbody></table>")
        parts.append(self.charts_svg())
        errors = [r for r in self.rows(level) if r["error"]]
        if errors:
            parts.append("<ul>" + "".join(f"<li><code>{e(r['artifact'])}</code> {e(r['status'])}: {e(r['error'])}</li>"
                                          for r in errors) + "</ul>")
        verdict_colour = "#1b5e20" if self.verdict.passed else "#b00020"
        parts.append(f'<p style="color:{verdict_colour}"><b>{e(self._verdict_line())}</b></p>')
        if self.verdict.gates:
            parts.append("<ul>" + "".join(
                f"<li>{'✅' if g.passed else '❌'} <code>{e(g.gate)}</code> {e(g.message)}</li>" for g in self.verdict.gates
            ) + "</ul>")
        if self.decisions:
            names = [n for n in self.artifacts if n != "fp32"]
            parts.append("<table><caption>decisions</caption><thead><tr><th>decision</th>"
                         + "".join(f"<th>{e(n)}</th>" for n in names) + "</tr></thead><tbody>")
            for d in self.decisions:
                parts.append(f"<tr><td>{e(d.decision)}</td>" + "".join(f"<td>{e(d.where.get(n, ''))}</td>" for n in names) + "</tr>")
            parts.append("</tbody></table>")
        parts.append("</div>")
        return "".join(parts)


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    if spec == "s":
        return str(value)
    if spec == "d":
        return str(int(value))
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if spec == "%":
        return f"{value * 100:.0f}%"
    return format(value, spec)


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ---- job envelope and small listings ---------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    stage: Optional[str]
    done: Optional[int]
    total: Optional[int]

    @classmethod
    def from_dict(cls, d: Any) -> "Progress":
        d = _d(d)
        return cls(d.get("stage"), d.get("done"), d.get("total"))

    def __str__(self) -> str:
        if not self.stage:
            return "-"
        if self.total:
            return f"{self.stage} {self.done or 0}/{self.total}"
        return str(self.stage)


@dataclass(frozen=True)
class Job:
    """The job envelope of ``GET /v1/comparisons/{id}``; ``report`` is set once it succeeded, and while it
    runs holds the sections finished so far (``report.partial``, ``report.sections_done``)."""

    id: str
    status: str
    cached: bool
    progress: Progress
    error: Optional[Dict[str, Any]]
    report: Optional[Report]
    links: Dict[str, str]
    created_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Job":
        d = _d(d)
        return cls(
            id=str(d.get("id", "")),
            status=str(d.get("status", "unknown")),
            cached=bool(d.get("cached", False)),
            progress=Progress.from_dict(d.get("progress")),
            error=d.get("error") if isinstance(d.get("error"), dict) else None,
            report=Report(d["report"]) if isinstance(d.get("report"), dict) else None,
            links={str(k): str(v) for k, v in _d(d.get("links")).items()},
            created_at=_when(d.get("created_at")),
            started_at=_when(d.get("started_at")),
            finished_at=_when(d.get("finished_at")),
            raw=d,
        )

    @property
    def done(self) -> bool:
        return self.status in ("succeeded", "failed")

    def reached(self, section: Optional[str]) -> bool:
        """Done, or (``section`` given) running with a report in which ``section`` is finished; a section
        named by its prefix ("accuracy") is reached when one of its parts is ("accuracy:fp32")."""
        if self.done:
            return True
        if section is None or self.report is None:
            return False
        return any(s == section or s.startswith(section + ":") for s in self.report.sections_done)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.status} {self.progress}{' cached' if self.cached else ''}>"


@dataclass(frozen=True)
class ArtifactLink:
    """One downloadable file: ``ort_qdq.onnx`` or an optimized graph like ``ort_qdq.all.onnx``."""

    name: str
    artifact: str
    level: Optional[str]
    size: Optional[int]
    url: str


@dataclass(frozen=True)
class Example:
    name: str
    description: str
    inputs: Any = field(repr=False, compare=False, default=None)
