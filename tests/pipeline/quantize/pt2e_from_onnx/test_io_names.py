"""The PT2E file of an ONNX upload is fed and read with the upload's own names.

torch.onnx names graph inputs and outputs after the torch module. Where the upload passes an input
straight through to an output (arabic-name-romanizer's encoder returns its bool mask), torch names
that output after the input and the input "<name>_orig": ORT then refused the upload's feed at every
level ("Required inputs (['src_mask_orig']) are missing from input feed").
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.quantize.pt2e_from_onnx.names import restore_io_names
from pt2e_upload import pt2e_of_upload
from tests import models


def _passthrough_upload(path):
    """x (float) -> Gemm -> Relu -> 'logits'; mask (bool) -> Identity -> 'mask_out', and Not(mask) -> 'inverted'."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1, name="gemm"),
         helper.make_node("Relu", ["g"], ["logits"], name="relu"),
         helper.make_node("Identity", ["mask"], ["mask_out"], name="mask_identity"),
         helper.make_node("Not", ["mask"], ["inverted"], name="not")],
        "passthrough",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("mask_out", TensorProto.BOOL, [1, 4]),
         helper.make_tensor_value_info("inverted", TensorProto.BOOL, [1, 4])],
        [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def passthrough_pt2e(tmp_path_factory):
    folder = tmp_path_factory.mktemp("io_names")
    upload = folder / "m.onnx"
    _passthrough_upload(upload)
    _, samples = pt2e_of_upload(upload, folder / "pt2e.onnx")
    return upload, folder / "pt2e.onnx", samples.evaluation[0]


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_pt2e_file_runs_on_the_upload_feed_and_names_its_outputs_like_the_upload(passthrough_pt2e, level):
    upload, pt2e_path, feed = passthrough_pt2e
    model = onnx.load(str(pt2e_path))
    assert [i.name for i in model.graph.input] == ["x", "mask"]
    assert [o.name for o in model.graph.output] == ["logits", "mask_out", "inverted"]
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    got = dict(zip(["logits", "mask_out", "inverted"],
                   ort.InferenceSession(str(pt2e_path), so, providers=["CPUExecutionProvider"]).run(None, feed)))
    ref = dict(zip(["logits", "mask_out", "inverted"],
                   ort.InferenceSession(str(upload), providers=["CPUExecutionProvider"]).run(None, feed)))
    np.testing.assert_array_equal(got["mask_out"], ref["mask_out"])
    np.testing.assert_array_equal(got["inverted"], ref["inverted"])
    assert np.abs(got["logits"] - ref["logits"]).max() < 0.1 * np.abs(ref["logits"]).max() + 1e-6


def _graph(nodes, inputs, outputs):
    return models.from_nodes(nodes, [(n, [2]) for n in inputs], [(n, [2]) for n in outputs])


def _run(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


def test_a_file_tensor_bearing_an_upload_name_is_moved_out_of_the_way():
    # torch's graph: input_1 -> Neg -> 'out' (an inner tensor) -> Relu -> 'relu_1' (the output).
    # The upload calls its input 'input.1' and its output 'out': the inner 'out' must not be confused with it.
    model = _graph([helper.make_node("Neg", ["input_1"], ["out"]), helper.make_node("Relu", ["out"], ["relu_1"])],
                   ["input_1"], ["relu_1"])
    x = np.array([-1.0, 2.0], dtype=np.float32)
    before = _run(model, {"input_1": x})
    assert restore_io_names(model, ["input.1"], ["out"]) == 3
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["input.1"] and [o.name for o in model.graph.output] == ["out"]
    np.testing.assert_array_equal(_run(model, {"input.1": x})[0], before[0])


def test_one_value_that_is_two_outputs_gets_a_second_name():
    model = _graph([helper.make_node("Neg", ["a"], ["n"])], ["a"], ["n", "n"])
    x = np.array([1.0, -3.0], dtype=np.float32)
    restore_io_names(model, ["a"], ["first", "second"])
    onnx.checker.check_model(model)
    assert [o.name for o in model.graph.output] == ["first", "second"]
    first, second = _run(model, {"a": x})
    np.testing.assert_array_equal(first, -x)
    np.testing.assert_array_equal(second, -x)


def test_an_upload_that_lists_one_tensor_twice_keeps_one_definition():
    """The upload's outputs are ['y', 'y'] (valid ONNX: one value, listed twice); torch writes the second
    as an Identity alias ('n_alias_1'), and both got the name 'y': two definitions of 'y' (ORT:
    "Duplicate definition of name (y)", so the PT2E path failed). Both outputs now name the one value."""
    model = _graph([helper.make_node("Neg", ["a"], ["n"]), helper.make_node("Identity", ["n"], ["n_alias_1"])],
                   ["a"], ["n", "n_alias_1"])
    x = np.array([1.0, -3.0], dtype=np.float32)
    restore_io_names(model, ["a"], ["y", "y"])
    onnx.checker.check_model(model)
    assert [o.name for o in model.graph.output] == ["y", "y"]
    # one definition, and the alias is gone: left in place it was one more reader of y (the Conv
    # before such an output stayed float on x86)
    assert [(n.op_type, list(n.output)) for n in model.graph.node] == [("Neg", ["y"])]
    first, second = _run(model, {"a": x})
    np.testing.assert_array_equal(first, -x)
    np.testing.assert_array_equal(second, -x)


def test_names_already_right_change_nothing():
    model = _graph([helper.make_node("Neg", ["a"], ["b"])], ["a"], ["b"])
    assert restore_io_names(model, ["a"], ["b"]) == 0


def test_an_input_that_is_itself_a_graph_output_converts_and_runs_on_the_upload_feed(tmp_path):
    """onnxscript's optimizer (specialization's constant folding) renamed such an input "x_orig",
    and the module build then looked for a feed of that name (KeyError: 'x_orig')."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])], [w])
    upload = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(upload))
    tool, samples = pt2e_of_upload(upload, tmp_path / "pt2e.onnx", calibration_samples=2)
    assert tool.conversion["parity"]["ok"]
    feed = samples.evaluation[0]
    y, x = ort.InferenceSession(str(tmp_path / "pt2e.onnx"), providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_array_equal(x, feed["x"])
    written = onnx.load(str(tmp_path / "pt2e.onnx"))
    assert [i.name for i in written.graph.input] == ["x"]
    # and the outputs are the upload's: 'y', and 'x' the input itself (it read 'dequantize_per_tensor_1', 'x__1')
    assert [o.name for o in written.graph.output] == ["y", "x"]
    assert not [n for n in written.graph.node if n.op_type == "Identity"]
