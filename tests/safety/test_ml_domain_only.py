"""A model that imports only ai.onnx.ml (onnxmltools' logistic regression: onnxruntime ships one as
logreg_iris.onnx) is refused with what it is and why nothing would be quantized; ORT runs it, so the
old hint, re-export with torch.onnx.export, did not apply. Without any known domain, the old refusal."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, save

from service.errors import UnsupportedModel


def _only(path, domain: str, *also: str, extra_nodes=()):
    node = helper.make_node("LinearRegressor", ["x"], ["y0"], domain="ai.onnx.ml", coefficients=[0.5, -1.0, 2.0],
                            intercepts=[0.1])
    scale = helper.make_node("Scaler", ["y0"], ["y"], domain="ai.onnx.ml", offset=[0.0], scale=[2.0])
    graph = helper.make_graph([node, scale, *extra_nodes], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, 1)]
                              + [helper.make_opsetid(d, 17) for d in also])
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


def test_importing_the_default_domain_with_no_node_in_it_is_refused_the_same_way(tmp_path):
    """skl2onnx imports '' beside ai.onnx.ml; with only ml nodes, the job ran all three paths to
    'ok', nothing quantized, every SQNR 'exact'."""
    from service.pipeline.inputs.safety import onnx_model_from_path

    with pytest.raises(UnsupportedModel, match=r"uses only ai.onnx.ml operators \(LinearRegressor, Scaler\)") as e:
        onnx_model_from_path(_only(tmp_path / "ml_and_default.onnx", "ai.onnx.ml", ""))
    assert e.value.code == "unsupported_model" and "runs in float as it is" in e.value.hint
    # One ai.onnx node beside them is a model the paths can run (its float ops are reported as such).
    cast = helper.make_node("Identity", ["y"], ["y_out"])
    model = onnx_model_from_path(_only(tmp_path / "with_identity.onnx", "ai.onnx.ml", "", extra_nodes=[cast]))
    assert any(n.op_type == "Identity" for n in model.graph.node)
