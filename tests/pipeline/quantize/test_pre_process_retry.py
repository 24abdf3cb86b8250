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


def _scaler_cast_mlp(path) -> None:
    """Scaler -> Cast(float) -> MatMul + Add -> Relu -> MatMul: surfaces' gradient-boosting surrogate."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml", offset=[0.0] * 4, scale=[1.0] * 4),
             helper.make_node("Cast", ["s"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["c", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "W2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "W"),
                               numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
                               numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_retry_whose_optimization_drops_the_only_typed_cast_runs_without_it(tmp_path):
    """The retry's ORT basic optimization removes the float -> float Cast after the Scaler, the only
    thing that typed what follows (ONNX infers no type for Scaler): ort_qdq came out "ok" with weight
    DequantizeLinear only, and ort_qoperator failed with an AttributeError inside ORT's quantizer."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_quant import preprocessed_for_ort, quantized_by_ort

    _scaler_cast_mlp(tmp_path / "m.onnx")
    quant_pre_process(str(tmp_path / "m.onnx"), str(tmp_path / "ort_own.onnx"), skip_symbolic_shape=True)
    assert "Cast" not in {n.op_type for n in onnx.load(str(tmp_path / "ort_own.onnx")).graph.node}  # the trigger
    path, note = preprocessed_for_ort(tmp_path / "m.onnx", tmp_path / "pre.onnx")
    assert "without a type" in note and "without that optimization" in note, note
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 4)).astype(np.float32)} for i in range(4)]
    settings = resolved_ort_settings(ComparisonOptions())
    for fmt in ("qdq", "qoperator"):
        quantized_by_ort(path, tmp_path / f"{fmt}.onnx", feeds, ["x"], quant_format=fmt, settings=settings)
        ops = [n.op_type for n in onnx.load(str(tmp_path / f"{fmt}.onnx")).graph.node]
        # activations quantized: a QuantizeLinear (QDQ) or the QLinear kernels (QOperator)
        assert "QuantizeLinear" in ops and (fmt == "qdq" or "QLinearMatMul" in ops), (fmt, ops)


def test_a_file_that_quantizes_weights_only_is_an_error_lint(tmp_path):
    """What the retry above used to give: DequantizeLinear on the weights, no QuantizeLinear anywhere.
    The path read "ok" with rows that said "quantize that input too"."""
    from service.pipeline.runtime.levels import file_facts_from_graph
    from service.pipeline.runtime.levels import LevelsResult
    from service.pipeline.verdict.lints import levels_lints
    from service.schemas.options import ComparisonOptions
    from service.pipeline.vocabulary import graph_from_model

    def facts(with_q):
        inits = [numpy_helper.from_array(np.ones((4, 4), np.int8), "wq"), numpy_helper.from_array(np.float32(0.1), "s"),
                 numpy_helper.from_array(np.int8(0), "z")]
        nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"])]
        x = "x"
        if with_q:
            nodes += [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                      helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
            x = "xd"
        nodes.append(helper.make_node("MatMul", [x, "w"], ["y"]))
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
        return file_facts_from_graph(graph_from_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])))

    for with_q in (False, True):
        lints = levels_lints(LevelsResult(optimized={"ort_qdq": {}}, agreement=[], timings={},
                                          files={"ort_qdq": facts(with_q)}), ComparisonOptions())
        codes = [x.code for x in lints if x.code == "weights_only"]
        assert codes == ([] if with_q else ["weights_only"])
