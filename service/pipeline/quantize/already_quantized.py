"""Uploads that are already quantized: what is in them, and why the quantize paths stand aside.

Quantizing a QDQ or QOperator file again either crashes inside ``quantize_static`` or stacks a
second set of Q/DQ pairs on integer tensors; neither answers a question anyone asked. For such an
upload the comparison keeps what is meaningful: the uploaded file as the ``fp32`` artifact (really
"as uploaded"), its inventory (what the producing tool wrote), and what ORT makes of it at every
level. The three quantize paths are ``skipped`` with the reason below.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from service.errors import PathSkipped
from service.pipeline.vocabulary import QUANTIZED_FILE_OPS, all_nodes, op_key

SKIP_HINT = ("upload the float model to compare the three quantizers; for this file the report shows what it "
             "holds (artifacts.fp32.quantization) and what ORT makes of it at each level (artifacts.fp32.optimized)")


@dataclass(frozen=True)
class Quantization:
    ops: dict[str, int]  # quantization op histogram (domain.op_type outside ai.onnx), subgraphs included
    kind: str  # "QDQ", "QOperator", "dynamic (DynamicQuantizeLinear)" or a "+"-joined mix

    @property
    def summary(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.ops.items(), key=lambda kv: -kv[1])[:6])
        return f"{self.kind}: {ops}"


def quantization_in_model(model) -> Quantization | None:
    """The quantization already in ``model`` (None for a float model)."""
    hist = Counter(op_key(n) for n in all_nodes(model.graph))
    ops = {k: v for k, v in hist.items() if k in QUANTIZED_FILE_OPS}
    if not ops:
        return None
    kinds = []
    dynamic = any("Dynamic" in k for k in ops)
    # quantize_dynamic writes its int8 weights with a DequantizeLinear where no integer kernel takes
    # them, and MatMulInteger/ConvInteger for the rest: both are its own, not QDQ or QOperator.
    static_qdq = ("QuantizeLinear",) if dynamic else ("QuantizeLinear", "DequantizeLinear")
    if any(k.endswith(static_qdq) and "Dynamic" not in k for k in ops):
        kinds.append("QDQ")
    qoperator = ("QGemm", "QAttention", "MatMulNBits") if dynamic else ("Integer", "QGemm", "QAttention", "MatMulNBits")
    if any("QLinear" in k or k.endswith(qoperator) for k in ops):
        kinds.append("QOperator")
    if dynamic:
        kinds.append("dynamic (DynamicQuantizeLinear)")
    return Quantization(ops=dict(sorted(ops.items())), kind=" + ".join(kinds) or "quantized")


def skip_if_quantized(model) -> None:
    """Raise PathSkipped when ``model`` is already quantized (a quantize path calls this first)."""
    q = quantization_in_model(model)
    if q is not None:
        raise PathSkipped(f"model is already quantized ({q.summary})", stage="quantize", hint=SKIP_HINT)
