"""quant_pre_process on a graph ORT's symbolic shape inference has no rule for: an ai.onnx.ml Scaler
before a Conv + BatchNormalization. Symbolic shape inference raises "Incomplete symbolic shape
inference" (pinned below, in the installed ORT); quant_pre_process's own skip_symbolic_shape=True
runs the rest, and its ORT basic optimization folds the BatchNormalization into the Conv. Before,
quantization went on from the fp32 file as is: the ORT files kept the BatchNormalization (PaddleOCR
recognizers: 6 of 6) while the report read "ORT has no QDQ fusion rule" for it."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _scaler_then_conv_bn(path) -> None:
    rng = np.random.default_rng(0)
    c = 4
    inits = [numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 3, 6, 6], np.int64), "image"),
             *[numpy_helper.from_array(v.astype(np.float32), n) for n, v in (
                 ("gamma", rng.random(c) + 0.5), ("beta", rng.standard_normal(c)), ("mean", rng.standard_normal(c)),
                 ("var", rng.random(c) + 0.5))]]
    nodes = [helper.make_node("Scaler", ["x"], ["xs"], domain="ai.onnx.ml", offset=[0.5] * 108, scale=[2.0] * 108),
             helper.make_node("Reshape", ["xs", "image"], ["img"]),
             helper.make_node("Conv", ["img", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["conv", "gamma", "beta", "mean", "var"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 108])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_symbolic_shape_inference_fails_and_pre_processing_still_folds_the_batchnorm(tmp_path):
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    from service.pipeline.quantize.ort_quant import preprocessed_for_ort

    _scaler_then_conv_bn(tmp_path / "m.onnx")
    with pytest.raises(Exception, match="Incomplete symbolic shape inference"):
        SymbolicShapeInference.infer_shapes(onnx.load(str(tmp_path / "m.onnx")), 2**31 - 1, False, False, 0)
    path, note = preprocessed_for_ort(tmp_path / "m.onnx", tmp_path / "pre.onnx")
    assert path == tmp_path / "pre.onnx", note  # was the fp32 file, "quantized the fp32 file as is"
    assert note.startswith("quant_pre_process failed (Exception: Incomplete symbolic shape inference); run again "
                           "with skip_symbolic_shape=True") and "optimization failed" not in note
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "BatchNormalization" not in ops and "Conv" in ops
