"""A model that imports only ai.onnx.ml (onnxmltools' logistic regression: onnxruntime ships one as
logreg_iris.onnx) is refused with what it is and why nothing would be quantized; ORT runs it, so the
old hint, re-export with torch.onnx.export, did not apply. Without any known domain, the old refusal."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, save

from service.errors import UnsupportedModel


def _only(path, domain: str):
    node = helper.make_node("LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml", coefficients=[0.5, -1.0, 2.0],
                            intercepts=[0.1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, 1)])
    model.ir_version = 8
    save(model, str(path))
    return path


def test_an_ml_only_model_is_refused_as_nothing_to_quantize(tmp_path):
    from service.pipeline.inputs.safety import onnx_model_from_path

    path = _only(tmp_path / "ml.onnx", "ai.onnx.ml")
    out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((1, 3), np.float32)})
    assert out[0].shape == (1, 1)  # ORT runs it
    with pytest.raises(UnsupportedModel, match="imports only the ai.onnx.ml domain") as e:
        onnx_model_from_path(path)
    assert e.value.code == "unsupported_model" and "torch.onnx.export" not in e.value.hint


def test_a_model_without_the_default_domain_keeps_the_re_export_hint(tmp_path):
    from service.pipeline.inputs.safety import onnx_model_from_path

    with pytest.raises(UnsupportedModel, match="does not import the default ONNX domain") as e:
        onnx_model_from_path(_only(tmp_path / "other.onnx", "com.example"))
    assert "torch.onnx.export" in e.value.hint
