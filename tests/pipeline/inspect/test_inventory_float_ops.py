"""What the inventory calls quantized: an op whose inputs come from DequantizeLinear and whose output
reaches a QuantizeLinear, with a Relu/Clip before that Q counting as part of its unit. PP-OCR's
detector (ort_qoperator) listed ConvTranspose x2, BatchNormalization, HardSigmoid x34 as quantized
with ops_float {}: in the file they run in float between a DQ and a Q, the ConvTranspose with a
float32 weight; MTCNN listed its PRelu (no Q on its output) the same way."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.inspect.inventory import inventory_from_onnx
from tests import models


def _consts():
    rng = np.random.default_rng(0)
    return [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.uint8(128), "z"),
            numpy_helper.from_array(np.full((1, 4, 1, 1), 0.25, np.float32), "slope"),
            numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.integers(-50, 50, (4, 4, 3, 3)).astype(np.int8), "wq"),
            numpy_helper.from_array(np.float32(0.01), "ws"), numpy_helper.from_array(np.int8(0), "wz")]


def _model(nodes, out_shape):
    model = models.from_nodes(nodes, [("x", [1, 4, 8, 8])], [("y", out_shape)], _consts(), opset=13, ir=7)
    onnx.checker.check_model(model)
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # a file ORT runs
    return model


def Q(i, o):
    return helper.make_node("QuantizeLinear", [i, "s", "z"], [o])


def DQ(i, o):
    return helper.make_node("DequantizeLinear", [i, "s", "z"], [o])


def test_a_float_weight_and_an_unquantized_output_are_float():
    model = _model([
        Q("x", "xq"), DQ("xq", "xd"),
        helper.make_node("PRelu", ["xd", "slope"], ["p"]),  # no Q on its output
        helper.make_node("MaxPool", ["p"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),  # reads the float PRelu
        Q("m", "mq"), DQ("mq", "md"),
        helper.make_node("ConvTranspose", ["md", "w"], ["ct"]),  # DQ in, Q out, its weight float32
        Q("ct", "cq"), DQ("cq", "cd"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
        helper.make_node("Conv", ["cd", "wd"], ["c"], pads=[1, 1, 1, 1]),  # the one quantized op: a unit with its Relu
        helper.make_node("Relu", ["c"], ["r"]), Q("r", "rq"), DQ("rq", "y"),
    ], [1, 4, 6, 6])
    inv = inventory_from_onnx(model)
    assert inv.ops_quantized == {"Conv": 1, "Relu": 1}
    assert inv.ops_float == {"ConvTranspose": 1, "MaxPool": 1, "PRelu": 1}
    assert inv.ops_float_reasons["ConvTranspose"] == "its weight is stored in float (no DequantizeLinear on it)"
    assert inv.ops_float_reasons["PRelu"] == "inputs are dequantized but the output is not quantized"
    assert inv.weights == "mixed"  # one int8 weight, one float32 ("weights: int8" read as all of them)


def test_in_a_qoperator_file_q_dq_around_a_float_op_are_a_bridge():
    """quantize_static (QOperator) writes QLinear kernels for what it quantizes and DQ -> op -> Q around
    an op it leaves float, so the next kernel reads 8-bit data."""
    model = _model([
        Q("x", "xq"), DQ("xq", "xd"),
        helper.make_node("HardSigmoid", ["xd"], ["h"]), Q("h", "hq"),
        helper.make_node("QLinearConv", ["hq", "s", "z", "wq", "ws", "wz", "s", "z"], ["cq"], pads=[1, 1, 1, 1]),
        DQ("cq", "y"),
    ], [1, 4, 8, 8])
    inv = inventory_from_onnx(model)
    assert inv.ops_quantized == {} and inv.ops_float == {"HardSigmoid": 1}
    assert inv.ops_float_reasons["HardSigmoid"].startswith("QOperator file: the quantizer left it in float")
    assert inv.format == "qoperator"


def test_a_bias_stored_as_int8_reads_int8_not_int32():
    """sudachi-b-imitator's QDQ file quantized a Gemm's shared bias as an int8 activation; the summary
    read "bias int32" and the decisions row "file: int32; disable_all: mixed"."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.uint8(128), "z"),
             numpy_helper.from_array(rng.integers(-50, 50, (8, 8)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.float32(0.01), "ws"), numpy_helper.from_array(np.int8(0), "wz"),
             numpy_helper.from_array(rng.integers(-50, 50, 8).astype(np.int8), "bq")]
    nodes = [Q("x", "xq"), DQ("xq", "xd"), helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
             helper.make_node("DequantizeLinear", ["bq", "ws", "wz"], ["b"]),
             helper.make_node("Gemm", ["xd", "w", "b"], ["g"]), Q("g", "gq"), DQ("gq", "y")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    inv = inventory_from_onnx(model)
    assert [b.dtype for b in inv.bias] == ["int8"] and inv.bias_summary == "int8"


def test_the_float_ops_after_a_dynamic_conv_integer_are_not_counted_as_quantized(tmp_path):
    """rapid_table_det's edge_det_quantized.onnx (quantize_dynamic): DynamicQuantizeLinear -> ConvInteger
    (int32) -> Cast -> Mul (scale) -> Add (bias) -> Relu. The inventory listed Mul x115, Add x74, Cast
    x65, Relu x51 as quantized ops ("runs on the 8-bit tensor"): it walked back to the ConvInteger
    without asking what the op reads, an int32 sum or a float32 value."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2]),
             helper.make_node("Conv", ["m", "w2", "b"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
                              [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
                               numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2"),
                               numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    src, dst = tmp_path / "f.onnx", tmp_path / "d.onnx"
    onnx.save(model, str(src))
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QUInt8)
    inv = inventory_from_onnx(onnx.load(str(dst)))
    assert inv.int8_kernels_in_file == {"ConvInteger": 2}
    assert not {"Cast", "Mul", "Add", "Relu", "MaxPool"} & set(inv.ops_quantized), inv.ops_quantized
    assert {"Mul", "Relu"} <= set(inv.ops_float)
    # and its weights are stored quantized (the CLI read "weights: none")
    assert inv.weights == "quantized_initializer" and inv.weight_dtypes == ["uint8"]
