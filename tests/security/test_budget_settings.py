"""Budgets travel from QUANTCOMPARE_BUDGET_* settings to the checks, in the API and in the worker."""

from __future__ import annotations

import pytest
from hostile_inputs import ser
from safety_models import conv_onnx, tiny_onnx
from onnx import TensorProto, helper

from service.api.prevalidate import prevalidate_upload
from service.config import Settings
from service.errors import BudgetExceeded
from service.jobs.spec import JobSpec
from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.context import RunLimits
from service.schemas.options import ComparisonOptions
from service.pipeline.inputs.safety import Budgets


def test_budget_settings_come_from_quantcompare_budget_variables():
    s = Settings.from_env({"QUANTCOMPARE_BUDGET_MAX_NODES": "50000", "QUANTCOMPARE_BUDGETS": '{"max_compression_ratio": 50}'})
    assert s.budgets == Budgets(max_nodes=50_000, max_compression_ratio=50.0)
    assert Settings().budgets == Budgets()
    with pytest.raises(ValueError, match="unknown budget"):
        Settings.from_env({"QUANTCOMPARE_BUDGET_MAX_NODEZ": "1"})
    with pytest.raises(ValueError, match="QUANTCOMPARE_BUDGETS"):
        Settings.from_env({"QUANTCOMPARE_BUDGET_MAX_NODES": "many"})


def test_the_job_spec_carries_the_budgets_to_the_worker():
    b = Budgets(max_nodes=7)
    spec = JobSpec.from_json(JobSpec(id="a" * 32, limits=RunLimits(budgets=b).to_json()).to_json())
    assert RunLimits.from_json(spec.limits, Budgets).budgets == b


def test_the_api_checks_uploads_against_the_configured_budgets(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(ser(conv_onnx()))
    prevalidate_upload(model, None, ComparisonOptions(), Settings(data_dir=tmp_path))
    with pytest.raises(BudgetExceeded) as e:
        prevalidate_upload(model, None, ComparisonOptions(), Settings(data_dir=tmp_path, budgets=Budgets(max_nodes=1)))
    assert e.value.details["budget"] == "max_nodes"


def test_the_shapes_samples_are_made_with_are_checked_before_any_array_exists(tmp_path):
    m = tiny_onnx(inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                  outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    path = tmp_path / "model.onnx"
    path.write_bytes(ser(m))
    request = ComparisonRequest(options=ComparisonOptions(input_shapes={"x": [1000, 4]}), model_path=path,
                                limits=RunLimits(budgets=Budgets(max_input_elements=1000)))
    with pytest.raises(BudgetExceeded) as e:
        run_comparison(request, tmp_path / "work")
    assert e.value.details["budget"] == "max_input_elements"
    assert "options.input_shapes" in e.value.hint  # the shape is the user's choice: 'Use a smaller model' was the hint


def test_many_samples_of_a_large_input_are_refused_before_any_is_made(tmp_path):
    """Each input fits max_input_elements, but 4096 + 4096 samples of it would not fit in memory."""
    from service.errors import BudgetExceeded
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions(calibration_samples=4096, eval_samples=4096,
                                input_shapes={"x": [64, 3, 16, 16]})
    with pytest.raises(BudgetExceeded) as e:
        run_comparison(ComparisonRequest(example="conv_relu", options=options,
                                         limits=RunLimits(budgets=Budgets(max_sample_bytes=512 << 20))), tmp_path)
    assert e.value.details["budget"] == "max_sample_bytes"
    assert "8192 samples" in e.value.message
    # the hint says what the user can change: the hint was 'Use a smaller model' for a tiny conv
    assert "calibration_samples" in e.value.hint and "at most 2730 samples" in e.value.hint, e.value.hint
