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
    ORT_OPTIMIZER_OPS,
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


def _gelu_nodes():
    return [helper.make_node("Div", ["x", "sq"], ["d"], name="div"), helper.make_node("Erf", ["d"], ["e"], name="erf"),
            helper.make_node("Add", ["e", "one"], ["a"], name="add"), helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
            helper.make_node("Mul", ["m", "half"], ["y"], name="mul2")]


@pytest.mark.parametrize("key, nodes, inits, shape", [
    ("com.microsoft.FusedConv", lambda: [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                                         helper.make_node("Relu", ["c"], ["y"], name="relu")],
     {"w": np.ones((4, 4, 3, 3), np.float32)}, [1, 4, 8, 8]),
    ("com.microsoft.Gelu", _gelu_nodes, {"sq": np.float32(1.4142135), "one": np.float32(1), "half": np.float32(0.5)},
     [2, 4]),
    ("com.microsoft.FusedMatMul", lambda: [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0], name="t"),
                                           helper.make_node("MatMul", ["t", "mw"], ["y"], name="mm")],
     {"mw": np.ones((4, 3), np.float32)}, [4, 4]),
], ids=["FusedConv", "Gelu", "FusedMatMul"])
def test_the_rewrite_named_for_an_ort_optimizer_op_is_the_one_that_writes_it(tmp_path, key, nodes, inits, shape):
    """ORT_OPTIMIZER_OPS names, for each contrib op, the transformer that writes it at extended: switching all the
    names it gives off (optimization.disable_specified_optimizers) leaves the op out. com.microsoft.Gelu at opset 17
    is GeluFusionL2's; 'GeluFusion' (the class name) switches nothing off."""
    import onnx

    from service.pipeline.ort.sessions import session_for

    graph = helper.make_graph(nodes(), "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(a), k) for k, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    names = [t.strip() for t in ORT_OPTIMIZER_OPS[key].split(",")]
    found = {}
    for disabled in ([], names):
        out = tmp_path / f"m.{len(disabled)}.onnx"
        session_for(src, "extended", optimized_model_path=out, disabled_optimizers=disabled)
        found[bool(disabled)] = key in {op_key(n) for n in onnx.load(str(out)).graph.node}
    assert found == {False: True, True: False}
