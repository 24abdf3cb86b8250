"""A tensor whose size the file does not state but computes from the input's shape is bounded at
the job's input shapes, before any session runs the graph (safety/activations.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from safety_models import save, tiny_onnx
from service.errors import BudgetExceeded
from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.inputs.safety import Budgets
from service.pipeline.inputs.safety.activations import check_activation_bytes, inferred_at_job_shapes
from service.schemas.options import ComparisonOptions

F = TensorProto.FLOAT
GiB = 1 << 30


def _expand_by_input_shape(factor: list[int], dims=(2, 4)):
    """~300 bytes: x (dims) -> MatMul -> ReduceMean to [1, 1] -> Expand to Shape(x) * factor -> Relu ->
    ReduceMean. No constant states the Expand's size, so the static checks cannot see it."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    k = numpy_helper.from_array(np.array(factor, np.int64), "k")
    return tiny_onnx(
        nodes=[helper.make_node("MatMul", ["x", "w"], ["a"]),
               helper.make_node("ReduceMean", ["a"], ["a1"], keepdims=1),
               helper.make_node("Shape", ["x"], ["s"]),
               helper.make_node("Mul", ["s", "k"], ["big"]),
               helper.make_node("Expand", ["a1", "big"], ["e"], name="expand"),
               helper.make_node("Relu", ["e"], ["r"]),
               helper.make_node("ReduceMean", ["r"], ["y"], keepdims=1)],
        inputs=[helper.make_tensor_value_info("x", F, list(dims))],
        outputs=[helper.make_tensor_value_info("y", F, [1, 1])], initializers=[w, k])


def test_a_gigabyte_tensor_computed_from_the_input_shape_is_refused_before_any_session(tmp_path):
    """The probe's file took 17 GB of RAM through a whole job; now the job stops in its fp32 stage,
    naming the tensor and the budget, with no level graph made."""
    path = save(_expand_by_input_shape([8000, 4000]), tmp_path / "m.onnx")  # [16000, 16000] float32 = 977 MiB
    options = ComparisonOptions(calibration_samples=2, eval_samples=1)
    with pytest.raises(BudgetExceeded) as e:
        run_comparison(ComparisonRequest(model_path=path, model_name="m.onnx", options=options), tmp_path / "job")
    assert e.value.code == "budget_exceeded" and e.value.details["budget"] == "max_activation_bytes"
    assert "tensor 'e'" in e.value.message and "976.6 MiB" in e.value.message and "input_shapes" in e.value.hint
    assert not list((tmp_path / "job" / "artifacts").glob("*.disable_all.onnx"))


def test_the_bound_is_at_the_job_s_shapes_and_moves_with_the_budget():
    symbolic = _expand_by_input_shape([8000, 4000], dims=("n", 4))
    # declared [n, 4]: at n=1 the Expand is [8000, 16000] = 488 MiB, at n=2 977 MiB
    check_activation_bytes(inferred_at_job_shapes(symbolic, {"x": (1, 4)}))
    big = inferred_at_job_shapes(symbolic, {"x": (2, 4)})
    with pytest.raises(BudgetExceeded, match="max_activation_bytes"):
        check_activation_bytes(big)
    check_activation_bytes(big, Budgets(max_activation_bytes=GiB))  # an operator's raised budget lets it in
