"""Every model that becomes JSON: the report (``report``, ``levels``) and the API envelopes (``api``)."""

from service.schemas.levels import AgreementRow, DecisionRow, Lint, OptimizedLevel, PlatformNote
from service.schemas.report import (
    SCHEMA_VERSION,
    Artifact,
    BiasInfo,
    CpuInfo,
    Environment,
    FileInfo,
    FoldedActivation,
    GateResult,
    ModelInfo,
    PathError,
    QuantizationInventory,
    QuantizedTensor,
    Report,
    SamplesInfo,
    TensorSpec,
    ToolInfo,
    Verdict,
)

__all__ = [
    "SCHEMA_VERSION", "AgreementRow", "Artifact", "BiasInfo", "CpuInfo", "DecisionRow", "Environment",
    "FileInfo", "FoldedActivation", "GateResult", "Lint", "ModelInfo", "OptimizedLevel", "PathError", "PlatformNote",
    "QuantizationInventory", "QuantizedTensor", "Report", "SamplesInfo", "TensorSpec", "ToolInfo", "Verdict",
]
