"""Every model that becomes JSON: the report (``report``, ``levels``) and the API envelopes (``api``)."""

from service.schemas.layers import LayerCell, LayerOrigin, LayerRow, LayersReport, LayersRetry, RetryArtifact
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
    "SCHEMA_VERSION", "AgreementRow", "LayerCell", "LayerOrigin", "LayerRow", "LayersReport", "LayersRetry",
    "RetryArtifact", "Artifact", "BiasInfo", "CpuInfo", "DecisionRow", "Environment",
    "FileInfo", "FoldedActivation", "GateResult", "Lint", "ModelInfo", "OptimizedLevel", "PathError", "PlatformNote",
    "QuantizationInventory", "QuantizedTensor", "Report", "SamplesInfo", "TensorSpec", "ToolInfo", "Verdict",
]
