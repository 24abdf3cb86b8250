"""Rewrites named from real ORT sessions on tiny graphs written with onnx.helper."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from service.pipeline.inspect.graph_diff import diff_graphs
from service.pipeline.vocabulary import graph_from_model, graph_from_path
from service.pipeline.ort.sessions import session_for, session_options_for
from tests import models


def _model(nodes, inits, inputs, outputs, opset=17):
    return models.from_nodes(nodes, inputs, outputs, inits, opset=opset)


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
    quantized to int8, per tensor (asymmetric), and its bias to int32. No QDQ rule fuses a
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
    assert named == [f"float weight of {op} quantized to int8 per tensor (asymmetric), bias to int32 "
                     "(WeightBiasQuantization: a per-tensor DequantizeLinear before it, a QuantizeLinear after it)"]
    feeds = {"x": np.abs(rng.standard_normal((1, 4, 8, 8))).astype(np.float32)}
    runs = {}
    for level, value in (("disable_all", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                         ("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)):
        so = ort.SessionOptions()
        so.graph_optimization_level = value
        runs[level] = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert not np.array_equal(runs["disable_all"], runs["basic"])  # the weight was rounded


def _wbq_model(op="Conv", *, dq_in="tensor", between=None, second_reader=False, bias="initializer",
               weight_sign="mixed"):
    """x -> Q -> DQ -> op(W float32, B) [-> between] -> Q -> DQ, one condition of WeightBiasQuantization changed at
    a time. ``dq_in``: "tensor" (scalar scale), "channel" (a per-channel DQ), None (a float input)."""
    rng = np.random.default_rng(0)
    conv = op in ("Conv", "ConvTranspose")
    shape_w, shape_x = ((4, 4, 3, 3), [1, 4, 8, 8]) if conv else ((8, 4), [2, 8])
    w = rng.standard_normal(shape_w).astype(np.float32)
    inits = {"w": np.abs(w) if weight_sign == "positive" else w, "s": np.array(0.05, np.float32),
             "z": np.array(0, np.uint8)}
    inputs, nodes, x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_x)], [], "x"
    if dq_in:
        sz = ["s", "z"]
        if dq_in == "channel":
            inits |= {"sc": np.full(shape_x[1], 0.05, np.float32), "zc": np.zeros(shape_x[1], np.uint8)}
            sz = ["sc", "zc"]
        nodes += [helper.make_node("QuantizeLinear", ["x", *sz], ["q"], axis=1),
                  helper.make_node("DequantizeLinear", ["q", *sz], ["dq"], axis=1)]
        x = "dq"
    ins = [x, "w"]
    if op != "MatMul":
        ins.append("b")
        if bias == "initializer":
            inits["b"] = rng.standard_normal(4).astype(np.float32)
        else:
            inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]))
    attrs = {"pads": [1, 1, 1, 1]} if conv else {}
    nodes.append(helper.make_node(op, ins, ["c"], name="target", **attrs))
    out = "c"
    if between:
        nodes.append(helper.make_node(between, ["c"], ["r"], name="between"))
        out = "r"
    nodes += [helper.make_node("QuantizeLinear", [out, "s", "z"], ["q2"]),
              helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"])]
    outputs = ["y"] + (["t"] if second_reader else [])
    if second_reader:
        nodes.append(helper.make_node("Tanh", [out], ["t"]))
    return _model(nodes, inits, inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])


def _weight_dq(g):
    """The oracle: the DequantizeLinear of an int8 initializer ORT put on the target's weight, or None."""
    target = next(n for n in g.nodes if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul"))
    dq = g.producer.get(target.input[1])
    return dq if dq is not None and dq.op_type == "DequantizeLinear" and g.dtypes.get(dq.input[0]) == "int8" else None


@pytest.mark.parametrize("case, kw, quantized", [
    ("Conv", {}, True),
    ("Gemm", {"op": "Gemm"}, True),
    ("MatMul is not one of its ops", {"op": "MatMul"}, False),
    ("float input: no DequantizeLinear before it", {"dq_in": None}, False),
    ("per-channel DequantizeLinear before it", {"dq_in": "channel"}, False),
    ("a Clip between it and the QuantizeLinear", {"between": "Clip"}, True),
    ("a Sigmoid between it and the QuantizeLinear", {"between": "Sigmoid"}, False),
    ("its output has a second reader", {"second_reader": True}, False),
    ("its bias is a graph input, not an initializer", {"bias": "input"}, False),
], ids=lambda v: v if isinstance(v, str) else "")
def test_weight_bias_quantization_conditions(tmp_path, case, kw, quantized):
    """weight_bias_quantization.cc, WeightBiasQuantization::ApplyImpl (ORT 1.32): Conv/ConvTranspose/Gemm only; input
    0 from a DequantizeLinear whose scale is a scalar; IsNoBranchPathToQuantizeLinear (one reader at each step,
    Relu/Clip allowed, ending in a QuantizeLinear); a bias, when present, a 1-D initializer. Each case changes one of
    them; the rewrite is named exactly where ORT's saved graph shows it."""
    model = _wbq_model(**kw)
    before, after = _level(tmp_path, model, "disable_all"), _level(tmp_path, model, "basic")
    assert (_weight_dq(after) is not None) == quantized
    named = [r for r in diff_graphs(before, after, previous="disable_all").rewrites
             if r.transformer == "WeightBiasQuantization"]
    assert bool(named) == quantized
    if quantized:
        assert named[0].summary.startswith("float weight of ") and "bias to int32" in named[0].summary


@pytest.mark.parametrize("config, quantized", [({}, True), ({"session.disable_quant_qdq": "1"}, False)],
                         ids=["Level1 default", "session.disable_quant_qdq=1"])
def test_weight_bias_quantization_is_a_level1_qdq_transformer(tmp_path, config, quantized):
    """graph_transformer_utils.cc registers WeightBiasQuantization in Level1 under `if (!disable_quant_qdq)`: basic
    runs it unless session.disable_quant_qdq is set; disabling it by that name stops it too (the name is ORT's)."""
    import onnxruntime as ort

    src = tmp_path / "m.onnx"
    src.write_bytes(_wbq_model().SerializeToString())
    for disabled, expect in (([], quantized), (["WeightBiasQuantization"], False)):
        out = tmp_path / f"m.{len(disabled)}.onnx"
        so = session_options_for("basic", optimized_model_path=out, disabled_optimizers=disabled)
        for k, v in config.items():
            so.add_session_config_entry(k, v)
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
        assert (_weight_dq(graph_from_path(out)) is not None) == expect


@pytest.mark.parametrize("weight_sign", ["positive", "mixed"])
def test_weight_bias_quantization_rounds_the_weight_asymmetric(tmp_path, weight_sign):
    """GetQuantizationParameter<int8_t> (core/util/qmath.h, Symmetric=false by default, as weight_bias_quantization.cc
    calls it): scale = (max - min) / 255 over [min(w, 0), max(w, 0)], zero point round(-128 - min / scale). A
    weight with no negative value gets zero point -128 (a symmetric scheme would write 0)."""
    after = _level(tmp_path, _wbq_model(weight_sign=weight_sign), "basic")
    dq = _weight_dq(after)
    w = _wbq_model(weight_sign=weight_sign).graph.initializer[0]
    from onnx import numpy_helper as nh

    w = nh.to_array(w).astype(np.float32)
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
    scale = (hi - lo) / 255
    assert float(after.init_array(dq.input[1])) == pytest.approx(scale, rel=1e-6)
    assert int(after.init_array(dq.input[2])) == int(np.rint(np.float32(-128 - lo / scale)))
    if weight_sign == "positive":
        assert int(after.init_array(dq.input[2])) == -128


@pytest.mark.parametrize("disabled", [[], ["MatmulTransposeFusion"]], ids=["on", "MatmulTransposeFusion disabled"])
def test_a_transpose_folded_into_matmul_is_matmul_transpose_fusion(tmp_path, disabled):
    """Transpose -> MatMul becomes com.microsoft.FusedMatMul at extended; the GraphTransformer that does it is
    registered as MatmulTransposeFusion (graph_transformer_utils.cc, Level2): disabling that name keeps the
    MatMul, so the rewrite's name is ORT's."""
    import onnxruntime as ort

    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0], name="t"),
             helper.make_node("MatMul", ["xt", "w"], ["y"], name="mm")]
    model = _model(nodes, {"w": np.ones((4, 3), np.float32)}, [_x((4, 4))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    graphs = {}
    for level in ("basic", "extended"):
        out = tmp_path / f"m.{level}.onnx"
        ort.InferenceSession(str(src), session_options_for(level, optimized_model_path=out, disabled_optimizers=disabled),
                             providers=["CPUExecutionProvider"])
        graphs[level] = graph_from_path(out)
    fused = any(n.op_type == "FusedMatMul" for n in graphs["extended"].nodes)
    assert fused == (not disabled)
    if fused:
        rewrites = diff_graphs(graphs["basic"], graphs["extended"], previous="basic").rewrites
        assert [r.transformer for r in rewrites] == ["MatMulScaleFusion, MatmulTransposeFusion"]


def _named_cases():
    """(name graph_diff gives, nodes, initializers, input shape, level, op the rewrite removes)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    qdq = {"s": np.array(0.05, np.float32), "z": np.array(0, np.uint8)}
    q = [helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    ones = np.ones((1, 4, 1, 1), np.float32)
    return [
        ("ReluQuantRewrite", [helper.make_node("Relu", ["x"], ["r"])] + q, qdq, (1, 4, 8, 8), "extended", "Relu"),
        ("ClipQuantRewrite", [helper.make_node("Add", ["x", "a"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["r"])] + q,
         {**qdq, "a": ones, "lo": np.array(0, np.float32), "hi": np.array(20, np.float32)}, (1, 4, 8, 8), "extended", "Clip"),
        ("ConvBNFusion", [helper.make_node("Conv", ["x", "w"], ["c"]),
                          helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"])],
         {"w": w, "g": np.ones(4, np.float32), "b": np.zeros(4, np.float32), "m": np.zeros(4, np.float32),
          "v": np.ones(4, np.float32)}, (1, 4, 8, 8), "basic", "BatchNormalization"),
        ("ConvAddFusion", [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "a"], ["y"])],
         {"w": w, "a": ones}, (1, 4, 8, 8), "basic", "Add"),
        ("ConvMulFusion", [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "a"], ["y"])],
         {"w": w, "a": 2 * ones}, (1, 4, 8, 8), "basic", "Mul"),
        ("EliminateIdentity", [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["y"])], {},
         (1, 4), "basic", "Identity"),
        ("EliminateDropout", [helper.make_node("Dropout", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["y"])], {},
         (1, 4), "basic", "Dropout"),
        ("ConvActivationFusion", [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
         {"w": w}, (1, 4, 8, 8), "extended", "Relu"),
        ("MatMulAddFusion", [helper.make_node("MatMul", ["x", "mw"], ["c"]), helper.make_node("Add", ["c", "mb"], ["y"])],
         {"mw": np.ones((4, 3), np.float32), "mb": np.ones(3, np.float32)}, (2, 4), "basic", "Add"),
        ("ConstantFolding", [helper.make_node("Neg", ["k"], ["kk"]), helper.make_node("Add", ["x", "kk"], ["y"])],
         {"k": np.ones(4, np.float32)}, (2, 4), "basic", "Neg"),
    ]


@pytest.mark.parametrize("name, nodes, inits, shape, level, op", _named_cases(), ids=[c[0] for c in _named_cases()])
def test_every_rewrite_name_is_one_ort_switches_off(tmp_path, name, nodes, inits, shape, level, op):
    """graph_diff names a rewrite by the name its GraphTransformer or RewriteRule registers under: switching that name
    off (optimization.disable_specified_optimizers, as runtime/levels.py's attribution does) keeps the node. A
    class name that is not the registered one (ReluQuantFusion registers as ReluQuantRewrite) switches nothing off,
    and the attribution then dropped the name."""
    for i, n in enumerate(nodes):
        n.name = n.name or f"{n.op_type.lower()}{i}"  # as exporters write them: graph_diff anchors on names
    model = _model(nodes, inits, [_x(shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    before = {"basic": "disable_all", "extended": "basic"}[level]
    graphs = {}
    for key, lv, disabled in (("before", before, []), ("on", level, []), ("off", level, [name])):
        out = tmp_path / f"m.{key}.onnx"
        session_for(src, lv, optimized_model_path=out, disabled_optimizers=disabled)
        graphs[key] = graph_from_path(out)
    assert op not in {n.op_type for n in graphs["on"].nodes}  # the rewrite happens
    assert op in {n.op_type for n in graphs["off"].nodes}  # and that name switches it off
    named = [r.transformer for r in diff_graphs(graphs["before"], graphs["on"], previous=before).rewrites]
    assert any(name in [t.strip() for t in (tr or "").split(",")] for tr in named), named
