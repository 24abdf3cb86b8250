"""quantcompare client: compare PT2E and ONNX Runtime quantization from Python, over HTTP.

    from quantcompare_client import Client

    with Client("http://127.0.0.1:8000") as qc:
        report = qc.compare("conv_relu")          # an example name, a path, or bytes
        report.summary()                           # compact table; Jupyter renders report itself
        qc.download(report.id, "ort_qdq.all.onnx", "out/")

Depends on httpx only (no torch, no onnxruntime, no numpy). ``quantcompare-client check`` is
the CI command built on it.
"""

from ._client import DEFAULT_TIMEOUT, AsyncClient, Client
from ._exceptions import (
    APIError,
    Busy,
    ComparisonFailed,
    ConnectError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    QuantCompareError,
    ServerError,
    Timeout,
    TransportError,
    Unauthorized,
    WaitTimeout,
)
from ._gates import GateSyntaxError, format_gate, parse_gate
from ._layers import LayerCell, LayerOrigin, LayerRow, Layers
from ._platforms import Platform
from ._report import (
    Advice,
    AdviceFigures,
    Profile,
    ProfiledNode,
    Recipe,
    Artifact,
    ArtifactFile,
    ArtifactLink,
    Decision,
    Example,
    GateResult,
    Inventory,
    Job,
    Latency,
    LevelDiff,
    Lint,
    ModelInfo,
    Numerics,
    OptimizedLevel,
    OutputNumerics,
    PathError,
    Progress,
    Report,
    Rewrite,
    UnfusedNode,
    Verdict,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # clients
    "Client",
    "AsyncClient",
    "DEFAULT_TIMEOUT",
    # results
    "Report",
    "Layers",
    "LayerRow",
    "LayerCell",
    "LayerOrigin",
    "Platform",
    "Job",
    "Progress",
    "Artifact",
    "ArtifactFile",
    "ArtifactLink",
    "PathError",
    "Inventory",
    "OptimizedLevel",
    "UnfusedNode",
    "Numerics",
    "OutputNumerics",
    "Latency",
    "LevelDiff",
    "Rewrite",
    "Decision",
    "Advice",
    "AdviceFigures",
    "Recipe",
    "Profile",
    "ProfiledNode",
    "Lint",
    "GateResult",
    "Verdict",
    "ModelInfo",
    "Example",
    # gates
    "parse_gate",
    "format_gate",
    "GateSyntaxError",
    # errors
    "QuantCompareError",
    "TransportError",
    "ConnectError",
    "Timeout",
    "WaitTimeout",
    "APIError",
    "InvalidRequest",
    "Unauthorized",
    "NotFound",
    "PayloadTooLarge",
    "Busy",
    "ServerError",
    "ComparisonFailed",
]

# Present every public name as living here (httpx does the same), so reprs and docs show
# ``quantcompare_client.Report`` rather than a private module.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("quantcompare_client._"):
        _obj.__module__ = "quantcompare_client"
del _name, _obj
