"""The largest tensor a graph computes at the job's input shapes, bounded before anything runs it.

The static checks bound what a file states (initializers, a ConstantOfShape or Expand fed by
constants), but a 300-byte graph can Expand its input to a shape computed from ``Shape(x) * [8000,
4000]``: 977 MiB per tensor, which the job's sessions (fp32, ORT's calibration, every level, the
per-tensor table) hold many times over, 17 GB of RAM measured. Once the job has fixed every input
shape, ONNX shape inference with data propagation derives such shapes, so each tensor it fixes is
held to ``max_activation_bytes``. A dim inference leaves open (a NonZero's count) is not bounded
here; the worker's memory limit stays the guard for those.
"""

from __future__ import annotations

import math

from service.pipeline.inputs.output_shapes import graph_only_copy
from service.pipeline.inputs.safety.budgets import DEFAULT_BUDGETS, Budgets
from service.pipeline.inputs.safety.onnx_checks import itemsize_of, safe_name


def inferred_at_job_shapes(model, input_shapes: dict[str, tuple[int, ...]]):
    """``model`` (weights not read) through ONNX shape inference with data propagation at the job's
    concrete ``input_shapes``; None when inference fails (the file is still run: ORT is the judge)."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(graph_only_copy(model, input_shapes), strict_mode=False,
                                                 data_prop=True)
    except Exception:  # noqa: BLE001 - a graph inference cannot follow is not refused for it
        return None


def check_activation_bytes(inferred, budgets: Budgets | None = None) -> None:
    """Refuse when a tensor of the main graph, at the shapes inference fixed, is past the budget."""
    budgets = budgets or DEFAULT_BUDGETS
    if inferred is None:
        return
    largest, name = 0, ""
    for vi in (*inferred.graph.value_info, *inferred.graph.output):
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not t.HasField("shape") \
                or not all(d.HasField("dim_value") for d in t.shape.dim):
            continue
        size = math.prod(d.dim_value for d in t.shape.dim) * itemsize_of(t.elem_type)
        if size > largest:
            largest, name = size, vi.name
    if largest > budgets.max_activation_bytes:
        refusal = budgets.refuse("max_activation_bytes",
                                 f"tensor '{safe_name(name)}' at the job's input shapes (ONNX shape inference)",
                                 largest, unit="bytes")
        refusal.hint = ("Run it at smaller input shapes (options.input_shapes), or ask the operator to raise "
                        "the budget 'max_activation_bytes'.")
        raise refusal
