"""Rewrites named from real ORT sessions on tiny graphs written with onnx.helper."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.inspect.graph_diff import diff_graphs
from service.pipeline.vocabulary import graph_from_model, graph_from_path
from service.pipeline.runtime.ort_sessions import session_for


def _model(nodes, inits, inputs, outputs, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _level(tmp_path, model, level):
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    out = tmp_path / f"m.{level}.onnx"
    session_for(src, level, optimized_model_path=out)
    return graph_from_path(out)


def _x(shape=(1, 4, 8, 8)):
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))


def test_shared_dequantize_is_duplicated_before_any_level(tmp_path):
    inits = {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq"),
             helper.make_node("Sigmoid", ["dq"], ["a"], name="sig"),
             helper.make_node("Tanh", ["dq"], ["b"], name="tanh")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "b")]
    model = _model(nodes, inits, [_x()], outs)
    diff = diff_graphs(graph_from_model(model), _level(tmp_path, model, "disable_all"), previous="file")
    assert [(r.summary, r.transformer) for r in diff.rewrites] == [
        ("DequantizeLinear duplicated for a shared input", "EnsureUniqueDQForNodeUnit")]


def test_batchnorm_folds_into_conv_at_basic(tmp_path):
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "b": np.zeros(4, np.float32),
             "g": np.ones(4, np.float32), "be": np.zeros(4, np.float32), "m": np.zeros(4, np.float32),
             "v": np.ones(4, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["y"], name="bn"),
             helper.make_node("Identity", ["y"], ["out"], name="id")]
    model = _model(nodes, inits, [_x()], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    before = _level(tmp_path, model, "disable_all")
    diff = diff_graphs(before, _level(tmp_path, model, "basic"), previous="disable_all")
    named = {r.summary: r.transformer for r in diff.rewrites}
    assert named["Conv + BatchNormalization -> Conv (BatchNormalization folded)"] == "ConvBNFusion"


def test_identical_graphs_have_no_rewrites(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = _model(nodes, {}, [_x()], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    g = graph_from_model(model)
    diff = diff_graphs(g, g, previous="file")
    assert (diff.nodes_added, diff.nodes_removed, diff.rewrites) == (0, 0, [])


def test_attributes_ort_adds_are_not_a_rewrite():
    def q(extra):
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q", **extra)]
        return graph_from_model(_model(nodes, {"s": np.array(0.1, np.float32), "z": np.array(0, np.int8)},
                                       [_x()], [helper.make_tensor_value_info("y", TensorProto.INT8, None)]))

    assert diff_graphs(q({}), q({"saturate": 1}), previous="file").rewrites == []


@pytest.mark.parametrize("level", ["basic", "extended"])
def test_every_rewrite_has_a_summary_and_names_nodes(tmp_path, level):
    inits = {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq"),
             helper.make_node("MaxPool", ["dq"], ["mp"], name="pool", kernel_shape=[2, 2]),
             helper.make_node("QuantizeLinear", ["mp", "s", "z"], ["q2"], name="q2"),
             helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"], name="dq2")]
    model = _model(nodes, inits, [_x()], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    diff = diff_graphs(graph_from_model(model), _level(tmp_path, model, level), previous="file")
    if level == "extended":  # the loop below would pass on an empty list (basic leaves this graph alone)
        assert diff.rewrites
    for r in diff.rewrites:
        assert r.summary and (r.removed or r.added)
    if level == "extended":
        # single-reader int8 pairs: QDQS8ToU8Transformer makes them uint8 on x86 before the drop
        import platform

        dtype = "int8" if platform.machine() in ("aarch64", "arm64") else "uint8"
        assert f"DequantizeLinear + QuantizeLinear removed around MaxPool (runs on {dtype})" in [
            r.summary for r in diff.rewrites]


@pytest.mark.parametrize("q_after", [True, False], ids=["Relu -> QuantizeLinear after it", "float output"])
@pytest.mark.parametrize("op", ["ConvTranspose", "Conv"])
def test_a_float_weight_between_dq_and_q_is_quantized_per_tensor_at_basic(tmp_path, op, q_after):
    """ORT 1.32's WeightBiasQuantization (Level1): a Conv/ConvTranspose whose input comes from a
    DequantizeLinear and whose output (through a Relu) a QuantizeLinear reads gets its float32 weight
    quantized to int8, per tensor and symmetric, and its bias to int32. No QDQ rule fuses a
    ConvTranspose on the CPU EP, so it keeps running in float on the rounded weight. LORE's detector
    (lineless_table_rec): ort_qoperator's 4 float ConvTransposes between QLinearAdd and QLinearConv
    lost 16.5 -> 14.8 dB at basic, and the rewrite read 'bias quantized to int32'."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
             "s": np.array(0.05, np.float32), "z": np.array(0, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq"),
             helper.make_node(op, ["dq", "w", "b"], ["c"], name="up", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r" if q_after else "y"], name="relu")]
    if q_after:
        nodes += [helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q2"], name="q2"),
                  helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"], name="dq2")]
    model = _model(nodes, inits, [_x()], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    before, after = _level(tmp_path, model, "disable_all"), _level(tmp_path, model, "basic")
    weight_dq = [n for n in after.nodes if n.op_type == "DequantizeLinear" and after.dtypes.get(n.input[0]) == "int8"]
    assert bool(weight_dq) == q_after  # the oracle: ORT's saved graph
    rewrites = diff_graphs(before, after, previous="disable_all").rewrites
    named = [r.summary for r in rewrites if r.transformer == "WeightBiasQuantization"]
    if not q_after:
        assert named == []
        return
    assert named == [f"float weight of {op} quantized to int8 per tensor, bias to int32 (WeightBiasQuantization: "
                     "DequantizeLinear before it, QuantizeLinear after it)"]
    feeds = {"x": np.abs(rng.standard_normal((1, 4, 8, 8))).astype(np.float32)}
    runs = {}
    for level, value in (("disable_all", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                         ("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)):
        so = ort.SessionOptions()
        so.graph_optimization_level = value
        runs[level] = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert not np.array_equal(runs["disable_all"], runs["basic"])  # the weight was rounded
