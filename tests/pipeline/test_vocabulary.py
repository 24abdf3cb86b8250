"""The vocabulary's dtype propagation against ORT itself: the session's output type is the oracle.

ORT's saved graphs carry no value_info for com.microsoft ops, so ``GraphIndex.dtypes`` infers them
from zero points; where it is wrong, int8 outputs read as float and the report counts ops
"left in float" that run on int8.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.vocabulary import (
    COMPUTE_OPS,
    INT8_COMPUTE_KERNELS,
    INT8_KERNELS,
    QDQ_DROP_OPS,
    QDQ_FUSION_LIST,
    QUANTIZED_KERNELS,
    graph_from_model,
    op_key,
)

_ORT_DTYPE = {"tensor(uint8)": "uint8", "tensor(int8)": "int8", "tensor(float)": "float32"}


def _const(name, value, dtype):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _qgemm(with_output_scale: bool):
    inputs = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", ""]
    inits = [_const("a_scale", 0.1, np.float32), _const("a_zp", 128, np.uint8),
             _const("b", np.ones((4, 3)), np.int8), _const("b_scale", 0.05, np.float32), _const("b_zp", 0, np.int8)]
    if with_output_scale:
        inputs += ["y_scale", "y_zp"]
        inits += [_const("y_scale", 0.2, np.float32), _const("y_zp", 128, np.uint8)]
    node = helper.make_node("QGemm", inputs, ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 4])],
                              [helper.make_empty_tensor_value_info("y")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _quantize_without_zero_point(output_dtype: int):
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=output_dtype)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_empty_tensor_value_info("y")],
                              [_const("s", 0.1, np.float32)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _ort_output_dtype(model) -> str:
    # A model without value_info for y: ORT infers the output type from the op's schema.
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return _ORT_DTYPE[sess.get_outputs()[0].type]


@pytest.mark.parametrize("model", [
    _qgemm(with_output_scale=True),
    _qgemm(with_output_scale=False),
    _quantize_without_zero_point(TensorProto.INT8),
    _quantize_without_zero_point(TensorProto.UINT8),
], ids=["QGemm with y_scale writes its y_zero_point's dtype",
        "QGemm without y_scale writes float",
        "QuantizeLinear without zero point writes output_dtype int8",
        "QuantizeLinear without zero point writes output_dtype uint8"])
def test_propagated_dtype_is_the_one_ort_runs(model):
    assert graph_from_model(model).dtypes["y"] == _ort_output_dtype(model)


def test_op_keys_keep_domains_apart():
    ms = helper.make_node("QLinearConv", [], [], domain="com.microsoft")
    onnx_ = helper.make_node("QLinearConv", [], [])
    assert (op_key(ms), op_key(onnx_)) == ("com.microsoft.QLinearConv", "QLinearConv")


def test_sets_that_answer_the_same_question_agree():
    # Every int8 compute kernel is an int8 kernel; the inventory's set only adds weight-only kernels;
    # the drop list is part of the fusion list; a compute op is never counted as an int8 kernel.
    assert INT8_COMPUTE_KERNELS <= INT8_KERNELS <= QUANTIZED_KERNELS
    assert QUANTIZED_KERNELS - INT8_KERNELS == {"com.microsoft.MatMulNBits"}
    assert QDQ_DROP_OPS < QDQ_FUSION_LIST
    assert not COMPUTE_OPS & INT8_KERNELS
