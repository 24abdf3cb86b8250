"""An upload that ONNX Runtime already optimized (a session's optimized_model_filepath at level
extended): the report says so, naming the fused ops and the rewrite that wrote them, and a file whose
ORT-only LayerNormalization (ONNX domain, opset < 17) onnx's checker refuses is refused saying why.
The one condition: the same model saved at level basic, where ORT fuses nothing into contrib ops."""
from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest

from service.errors import UnsupportedModel
from tests import models


def _conv_relu(path):
    return models.save("conv_relu", path, pads=1, scale=0.3, names=("conv", "relu"), ir=8)


def _saved_by_ort(src, dst, level):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return dst


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC],
                         ids=["saved at extended", "saved at basic"])
def test_an_upload_ort_already_optimized_gets_a_lint_naming_the_fused_ops(tmp_path, level):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    saved = _saved_by_ort(_conv_relu(tmp_path / "m.onnx"), tmp_path / "saved.onnx", level)
    fused = [n for n in onnx.load(str(saved)).graph.node if n.domain == "com.microsoft"]
    extended = level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert [n.op_type for n in fused] == (["FusedConv"] if extended else [])  # what ORT writes, per level
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=saved, model_name="saved.onnx", options=options), tmp_path / "job")
    lints = [lint for lint in report.lints if lint.code == "ort_optimized_upload"]
    if not extended:
        assert lints == []
        return
    assert len(lints) == 1 and "com.microsoft.FusedConv x1 (ConvActivationFusion)" in lints[0].message
    assert "as exported" in lints[0].hint


def test_ort_s_own_layer_normalization_below_opset_17_is_refused_saying_ort_wrote_it(tmp_path):
    import torch

    from service.pipeline.inputs.safety import onnx_model_from_path

    src = tmp_path / "ln.onnx"
    torch.onnx.export(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)).eval(), (torch.randn(1, 8),),
                      str(src), opset_version=14, dynamo=False)
    onnx_model_from_path(src)  # as exported: accepted
    saved = _saved_by_ort(src, tmp_path / "saved.onnx", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    assert any(n.op_type == "LayerNormalization" and n.domain == "" for n in onnx.load(str(saved)).graph.node)
    with pytest.raises(UnsupportedModel, match="LayerNormalization") as e:
        onnx_model_from_path(saved)
    assert "saved by ONNX Runtime after optimizing it" in e.value.hint
