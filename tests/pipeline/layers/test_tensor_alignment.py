"""Alignment of fp32 tensors to their counterparts in quantized files, pinned on minimal models
where one quantizer setting changes what the quantizer writes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.layers.tensor_alignment import aligned_tensors
from tests import models


def _conv_relu_conv(path, *, bn: bool = False):
    """x -> Conv -> [BatchNormalization] -> Relu -> Conv -> y, every node named."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b1"),
        numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32) * 0.3, "w2"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["conv_out"], pads=[1, 1, 1, 1], name="conv1")]
    relu_in = "conv_out"
    if bn:
        for n, v in (("s", 1.5), ("bias", 0.2), ("mean", 0.1), ("var", 2.0)):
            inits.append(numpy_helper.from_array(np.full(4, v, np.float32), f"bn_{n}"))
        nodes.append(helper.make_node("BatchNormalization", ["conv_out", "bn_s", "bn_bias", "bn_mean", "bn_var"],
                                      ["bn_out"], name="bn"))
        relu_in = "bn_out"
    nodes += [helper.make_node("Relu", [relu_in], ["relu_out"], name="relu"),
              helper.make_node("Conv", ["relu_out", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return model


def _quantized(src, dst, fmt, **extra):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.feeds = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(src), str(dst), Reader(), quant_format=fmt, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, extra_options=extra)
    return onnx.load(str(dst))


@pytest.mark.parametrize("keep", [False, True], ids=["relu removed into the Q", "relu kept (QDQKeepRemovableActivations)"])
def test_qdq_relu_removal_moves_the_relu_name_onto_the_conv_output(tmp_path, keep):
    """ORT's QDQRemovableActivation.quantize removes a Relu after a quantized Conv unless
    QDQKeepRemovableActivations (or symmetric activations) is set; the Conv's raw output then
    carries the Relu's name. Alignment compares the right quantity either way."""
    from onnxruntime.quantization import QuantFormat

    fp32 = _conv_relu_conv(tmp_path / "m.onnx")
    q = _quantized(tmp_path / "m.onnx", tmp_path / "q.onnx", QuantFormat.QDQ, QDQKeepRemovableActivations=keep)
    relu_in_file = any(n.op_type == "Relu" for n in q.graph.node)
    assert relu_in_file == keep  # the one condition changes what ORT writes
    al = aligned_tensors(fp32, q, names_shared=True)
    relu, conv = al.located["relu_out"], al.located["conv_out"]
    assert relu.tensor == "relu_out_DequantizeLinear_Output" and relu.scale is not None
    if keep:
        assert conv.tensor == "conv_out_DequantizeLinear_Output" and conv.scale is not None
    else:
        # 'relu_out' in the file is the Conv's raw output: the right tensor for fp32 'conv_out', read raw.
        producer = next(n for n in q.graph.node if "relu_out" in n.output)
        assert producer.op_type == "Conv"
        assert conv.tensor == "relu_out" and conv.scale is None and "dropped the Relu" in conv.how


def test_qoperator_relu_removal_leaves_the_conv_output_out(tmp_path):
    from onnxruntime.quantization import QuantFormat

    fp32 = _conv_relu_conv(tmp_path / "m.onnx")
    q = _quantized(tmp_path / "m.onnx", tmp_path / "q.onnx", QuantFormat.QOperator)
    assert not any(n.op_type == "Relu" for n in q.graph.node)
    al = aligned_tensors(fp32, q, names_shared=True)
    assert "conv_out" in al.left_out and "as integers" in al.left_out["conv_out"]
    relu = al.located["relu_out"]
    assert relu.integer and relu.tensor == "conv_out_quantized" and relu.scale is not None


def test_folded_batchnorm_leaves_the_pre_bn_value_out(tmp_path):
    """A file that folded BN into the Conv holds no tensor equal to fp32's pre-BN Conv output."""
    from onnxruntime.quantization import QuantFormat

    fp32 = _conv_relu_conv(tmp_path / "m.onnx", bn=True)
    # quantize the BN-free graph ORT's basic level writes (ConvBNFusion), as pre-processing would
    from service.pipeline.ort.sessions import session_for

    session_for(tmp_path / "m.onnx", "basic", optimized_model_path=tmp_path / "folded.onnx")
    folded = onnx.load(str(tmp_path / "folded.onnx"))
    assert not any(n.op_type == "BatchNormalization" for n in folded.graph.node)
    q = _quantized(tmp_path / "folded.onnx", tmp_path / "q.onnx", QuantFormat.QDQ)
    al = aligned_tensors(fp32, q, names_shared=True)
    assert "conv_out" in al.left_out
    assert "bn_out" in al.located and "relu_out" in al.located


def test_a_rewritten_op_is_found_through_the_module_the_converter_named_after_the_onnx_node():
    """ONNX uploads reach PT2E through the ONNX->torch converter, which names each module after its
    ONNX node (onnx2torch: ``inner.GlobalAveragePool@0``); the re-export writes that into
    ``pkg.torch.onnx.name_scopes``. GlobalAveragePool comes back as ReduceMean: structure alone
    cannot match it, the module name can, and what follows matches on structure again."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    fp32 = helper.make_model(helper.make_graph([
        helper.make_node("Relu", ["x"], ["r"], name="Relu@0"),
        helper.make_node("GlobalAveragePool", ["r"], ["pooled"], name="GlobalAveragePool@0"),
        helper.make_node("Sigmoid", ["pooled"], ["y"], name="Sigmoid@0"),
    ], "fp32", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])]))

    def scoped(node, *scopes):
        entry = node.metadata_props.add()
        entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(["", *scopes])
        return node

    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    exported = helper.make_model(helper.make_graph([
        scoped(helper.make_node("Relu", ["x"], ["relu"], name="node_relu"), "inner.Relu@0", "relu"),
        scoped(helper.make_node("ReduceMean", ["relu", "axes"], ["mean"], name="node_mean"),
               "inner.GlobalAveragePool@0", "mean"),
        scoped(helper.make_node("Sigmoid", ["mean"], ["sigmoid"], name="node_sigmoid"), "inner.Sigmoid@0", "sigmoid"),
    ], "pt2e", [x], [helper.make_tensor_value_info("sigmoid", TensorProto.FLOAT, [1, 4, 1, 1])], initializer=[axes]))
    al = aligned_tensors(fp32, exported, names_shared=False)
    assert al.located["pooled"].tensor == "mean" and "GlobalAveragePool@0" in al.located["pooled"].how
    assert al.located["y"].tensor == "sigmoid" and al.located["y"].how.startswith("structure")
    # without the module names nothing after the rewritten op can be aligned
    for n in exported.graph.node:
        del n.metadata_props[:]
    bare = aligned_tensors(fp32, exported, names_shared=False)
    assert "pooled" in bare.left_out and "y" in bare.left_out


def _embedding_then_matmul(path):
    """ids -> Gather(table) -> MatMul -> y: ORT's QOperator Gather reads the int8 table directly, so no
    QuantizeLinear writes its integer output; only the QLinearMatMul reading it states its step."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((50, 8)).astype(np.float32), "table"),
             numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32) * 0.3, "w")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="embedding"),
             helper.make_node("MatMul", ["emb", "w"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return model


def _embedding_in_qoperator(tmp_path):
    """(fp32 model, the file ORT's quantize_static writes for it in QOperator format)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    fp32 = _embedding_then_matmul(tmp_path / "m.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"ids": np.random.default_rng(i).integers(0, 50, (1, 6))} for i in range(3)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QOperator)
    return fp32, onnx.load(str(tmp_path / "q.onnx"))


def test_a_qoperator_gather_of_a_quantized_table_is_dequantized_with_the_table_s_step(tmp_path):
    """Before: the Gather's int8 output was compared raw with fp32 ('integer tensor without a single step'),
    a -29 dB 'worst tensor' on every transformer's embedding (the walk followed the ids, not the table)."""
    fp32, q = _embedding_in_qoperator(tmp_path)
    gather = next(n for n in q.graph.node if n.op_type == "Gather")
    assert gather.input[0].endswith("_quantized")  # ORT wrote the Gather on the int8 table
    al = aligned_tensors(fp32, q, names_shared=True)
    emb = al.located["emb"]
    matmul = next(n for n in q.graph.node if n.op_type == "QLinearMatMul")
    assert matmul.input[0] == gather.output[0]
    scale = float(numpy_helper.to_array(next(t for t in q.graph.initializer if t.name == matmul.input[1])))
    assert emb.tensor == gather.output[0] and emb.integer and emb.scale == pytest.approx(scale)
    assert al.located["ids"].how.endswith("integer in both files, compared as is")  # ids stay ids


def test_an_integer_tensor_with_no_step_is_left_out_not_compared_raw(tmp_path):
    """The same file with the QLinearMatMul's input scale made per channel: nothing states one step."""
    fp32, q = _embedding_in_qoperator(tmp_path)
    matmul = next(n for n in q.graph.node if n.op_type == "QLinearMatMul")
    for t in q.graph.initializer:
        if t.name == matmul.input[1]:
            t.CopyFrom(numpy_helper.from_array(np.full(8, numpy_helper.to_array(t), np.float32), t.name))
    al = aligned_tensors(fp32, q, names_shared=True)
    assert "emb" not in al.located and "states nowhere" in al.left_out["emb"]


def _mlp(path, *, gemm: bool):
    """x -> MatMul + Add (or the Gemm quant_pre_process fuses them into) -> a1 -> Relu -> MatMul + Add -> y."""
    model = models.build("mlp", gemm=gemm, ir=8)
    onnx.save(model, path)
    return model


def test_a_fused_qoperator_op_that_absorbed_the_relu_leaves_the_pre_relu_value_out(tmp_path):
    """quant_pre_process fuses MatMul + Add into a Gemm, and QOperator's QGemm writes 'a1_quantized' at
    the Relu's range: the value after the Relu. Matched by name, fp32's pre-Relu 'a1' read as a 3.5 dB
    row and the per-tensor table's origin ("falls 18.2 dB at a1") on a file at 22 dB."""
    from onnxruntime.quantization import QuantFormat
    from service.pipeline.vocabulary import graph_from_model

    fp32 = _mlp(tmp_path / "m.onnx", gemm=False)
    _mlp(tmp_path / "pre.onnx", gemm=True)
    rng = np.random.default_rng(1)

    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(tmp_path / "pre.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    q = onnx.load(str(tmp_path / "q.onnx"))
    g = graph_from_model(q)
    gemm = g.producer["a1_quantized"]
    assert gemm.op_type == "QGemm" and not any(n.op_type == "Relu" for n in q.graph.node)  # the oracle
    al = aligned_tensors(fp32, q, names_shared=True)
    assert "a1" in al.left_out and "as integers" in al.left_out["a1"], al.located.get("a1")
    assert al.located["r1"].tensor == "a1_quantized"


@pytest.mark.parametrize("identity", [False, True], ids=["Add -> Relu", "Add -> Identity -> Relu (Paddle)"])
def test_a_bias_add_folded_into_the_conv_leaves_the_pre_bias_value_out(tmp_path, identity):
    """PaddlePaddle exports write a Conv's bias as an Add of a constant after it; ORT's basic level
    (quant_pre_process) folds it in (ConvAddFusion), and the quantizer removes the Relu after it. The
    file's Conv output is then relu(conv + bias): tinyocr's PP-OCRv6 detector read -4.3 dB for its
    first Conv, compared with fp32's value before the Add (37.8 dB against what the file holds)."""
    from onnxruntime.quantization import QuantFormat

    from service.pipeline.ort.sessions import session_for

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "bias1"),
             numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32) * 0.3, "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["conv_out"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Add", ["conv_out", "bias1"], ["add_out"], name="bias_add"),
             *([helper.make_node("Identity", ["add_out"], ["id_out"], name="identity")] if identity else []),
             helper.make_node("Relu", ["id_out" if identity else "add_out"], ["relu_out"], name="relu"),
             helper.make_node("Conv", ["relu_out", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], inits)
    fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fp32.ir_version = 8
    onnx.save(fp32, tmp_path / "m.onnx")
    session_for(tmp_path / "m.onnx", "basic", optimized_model_path=tmp_path / "fused.onnx")
    fused = onnx.load(str(tmp_path / "fused.onnx"))
    assert "Add" not in {n.op_type for n in fused.graph.node}  # ConvAddFusion, in the installed ORT
    q = _quantized(tmp_path / "fused.onnx", tmp_path / "q.onnx", QuantFormat.QDQ)
    al = aligned_tensors(fp32, q, names_shared=True)
    assert "the file folded the Add after it" in al.left_out["conv_out"]
    assert "as its bias" in al.located["add_out"].how and "relu_out" in al.located
    # the Relu the quantizer dropped into the QuantizeLinear: the Add's value is the float before it
    assert "compared the float value the file computes before its QuantizeLinear" in al.located["add_out"].how
