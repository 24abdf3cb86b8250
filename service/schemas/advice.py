"""Report models for why ORT left a node in float (blockers) and for measured advice."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UnfusedNode(BaseModel):
    """One compute node ORT runs in float at one level, and the first ORT condition it fails."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    node: str  # node name in ORT's saved graph (the file's name when ORT kept it)
    op_type: str  # key as in op_histogram (domain.op_type outside ai.onnx)
    blocker: str  # stable code, see service/pipeline/inspect/blockers.py BLOCKERS and docs/report.md
    detail: str  # this node's facts: dtypes, readers, the Q/DQ that is missing
    fix: str  # what a user would change


class AdviceFigures(_Model):
    int8_coverage: float | None = None
    latency_ms: float | None = None  # median of the alternated runs
    latency_min_ms: float | None = None  # fastest run: what load from other jobs cannot inflate
    sqnr_db: float | None = None  # worst output vs fp32; None = identical outputs
    level: str | None = None  # the ORT level the figures were taken at


class AdviceMeasured(_Model):
    before: AdviceFigures
    after: AdviceFigures
    seconds: float | None = None  # job time the re-run cost (quantize + session + runs)
    how: str = ""


class RecipeStep(_Model):
    """One step from the fp32 file to the file ``quantize_static`` read."""

    call: str | None = None  # ORT's public function ("onnxruntime.quantization.shape_inference.quant_pre_process"); None: quantcompare's own
    kwargs: dict[str, Any] = Field(default_factory=dict)
    what: str = ""


class Recipe(_Model):
    """How to make a candidate's file and session outside the service (advice/recipe.py)."""

    tool: str | None = None  # "onnxruntime" | "torchao" | None: no recipe for the tool that made the artifact
    steps: list[RecipeStep] = Field(default_factory=list)  # before quantize_static, in order
    quantize_static: dict[str, Any] | None = None  # its keyword arguments, enum members by name
    pt2e: dict[str, Any] | None = None  # the torchao quantizer and its config
    session: dict[str, str] = Field(default_factory=dict)  # ORT session config entries the change needs
    level: str | None = None  # the GraphOptimizationLevel the change was measured at
    options: dict[str, Any] | None = None  # the complete job options that re-run the job with the change
    options_note: str | None = None  # why ``options`` is null, when it is
    exact: bool = False  # every step is a public call: ``python`` makes the candidate's file
    note: str | None = None  # what keeps it from being exact, or why there is no recipe
    python: str = ""  # the same, ready to paste


class AdviceEntry(_Model):
    artifact: str
    change: dict[str, Any]  # the options a user would set, e.g. {"ort": {"activation_type": "uint8"}}
    reason: str
    measured: AdviceMeasured | None = None  # None: not re-run (budget), the reason says so
    adopted: bool = True  # False: measured and refuted (kept in ``advice_refuted``)
    blocked_nodes: int = 0  # unfused nodes whose blocker this change addresses
    # Those of them ORT no longer runs in float with the change (node names), counted in the graph ORT
    # saved at the advice level; None when the change addresses no blocked node or was not re-run.
    # Reported, never a veto: the adopt rule reads latency and SQNR only.
    blocked_fused: list[str] | None = None
    recipe: Recipe | None = None  # how to make this change outside the service (set by the advice stage)
