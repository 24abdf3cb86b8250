"""A model that computes in float64 (scikit-learn exports with DoubleTensorType, numpy-first code):
ORT's quantize_static quantizes FLOAT and FLOAT16 tensors only (qdq_quantizer.py
_is_tensor_quantizable), so its file is the float model. The lint says that is why, and no second
lint claims the file "is quantized"; the same graph in float32 is quantized (the one condition)."""
from __future__ import annotations

import pytest
from onnx import TensorProto

from tests import models


def _matmul_relu(path, dtype):
    return models.save("matmul_relu", path, x_shape=[1, 8], w=(8, 4), elem=dtype, ir=8)


@pytest.mark.parametrize("dtype", [TensorProto.DOUBLE, TensorProto.FLOAT], ids=["float64", "float32"])
def test_a_float64_model_is_left_float_and_the_lint_says_why(tmp_path, dtype):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    path = _matmul_relu(tmp_path / "m.onnx", dtype)
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all", "all"], "calibration_samples": 2,
        "eval_samples": 1, "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, model_name="m.onnx", options=options), tmp_path / "job")
    codes = {(lint.code, lint.artifact): lint for lint in report.lints}
    if dtype == TensorProto.FLOAT:
        assert ("nothing_quantized", "ort_qdq") not in codes
        assert report.artifacts["pt2e_qdq"].status == "ok"
        return
    lint = codes[("nothing_quantized", "ort_qdq")]
    assert "float64 (1)" in lint.message and "float32 and float16 tensors only" in lint.message
    assert "float32" in lint.hint and "_is_tensor_quantizable" in lint.source
    assert ("no_int8_kernels", "ort_qdq") not in codes  # it would say "the file is quantized"
    pt2e = report.artifacts["pt2e_qdq"]
    assert pt2e.status == "skipped" and "float64" in pt2e.error.hint and ".pt2" not in pt2e.error.hint
