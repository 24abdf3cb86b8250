"""A Keras export's PRelu slope is [1, C, 1, 1]; the converter wrote it as where(x >= 0, x, x * slope),
which reads the Conv output three times: its int8 Q/DQ then had three readers, which ORT's
QDQS8ToU8Transformer does not convert, and every Conv of the PT2E file stayed float on x86 (MTCNN's
P-Net from a PyPI wheel: int8 coverage 0.00 at every level, 0.60 for ORT's own quantizer).

The oracle: ORT's optimized graph of the PT2E file at level all."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from pt2e_upload import pt2e_of_upload


def test_a_keras_prelu_slope_stays_one_prelu_and_the_conv_before_it_runs_int8(tmp_path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b"),
             numpy_helper.from_array((rng.random((1, 8, 1, 1)) * 0.3).astype(np.float32), "slope")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("PRelu", ["c", "slope"], ["p"], name="prelu"),
         helper.make_node("Conv", ["p", "w2", "b"], ["y"], pads=[1, 1, 1, 1], name="conv2")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [*inits, numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), "w2")])
    upload = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(upload))
    tool, _ = pt2e_of_upload(upload, tmp_path / "pt2e.onnx")
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "pt2e.onnx")).graph.node)
    assert ops["PRelu"] == 1 and not ops["Where"] and not ops["GreaterOrEqual"], ops

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "pt2e.all.onnx")
    ort.InferenceSession(str(tmp_path / "pt2e.onnx"), so, providers=["CPUExecutionProvider"])
    ran = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "pt2e.all.onnx")).graph.node)
    assert ran["QLinearConv"] >= 1, ran  # the first Conv's output has one reader: ORT runs it int8
