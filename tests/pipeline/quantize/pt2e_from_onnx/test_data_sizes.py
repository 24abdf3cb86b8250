"""A NonZero whose count the data decides (issue 42: a TTS model's PT2E path was skipped, "conversion failed at
NonZero"). The converter carries the count as a torch SymInt through the shape arithmetic on it, so
torch.export traces the module with an unbacked size, PT2E quantizes it, and each sample gets its own sizes.
Real torch.export, PT2E and ORT throughout."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from tests.onnx_torch.onnx_parity import ort_outputs, torch_module  # noqa: E402
from pt2e_upload import pt2e_of_upload  # noqa: E402

F = TensorProto.FLOAT


def _i64(v, name):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def _gathered(decide: bool = False):
    """x[1, 16] -> s = x @ Wx; idx = NonZero(s > 0)[1] (a data-decided count n); h = Gather(table, idx) @ W2
    [n, 8]; Reshape(h, Concat(Shape(h)[0], [2, 4])) -> Relu -> ReduceSum over the n rows -> y[1, 2, 4].
    ``decide``: the target shape goes through Where(Equal(n, 0), 1, n) instead, a decision on the count."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "Wx"], ["s"], name="score"),
             helper.make_node("Greater", ["s", "zero"], ["keep"], name="keep"),
             helper.make_node("NonZero", ["keep"], ["nz"], name="nz"),
             helper.make_node("Gather", ["nz", "one"], ["idx"], name="cols", axis=0),
             helper.make_node("Gather", ["table", "idx"], ["rows"], name="lookup", axis=0),
             helper.make_node("MatMul", ["rows", "W2"], ["h"], name="proj"),
             helper.make_node("Shape", ["h"], ["hs"], name="shape"),
             helper.make_node("Gather", ["hs", "zero_i"], ["n"], name="count", axis=0),
             helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="n1")]
    if decide:
        nodes += [helper.make_node("Equal", ["n1", "zero_v"], ["empty"], name="empty"),
                  helper.make_node("Where", ["empty", "one_v", "n1"], ["n2"], name="at_least_one")]
    nodes += [helper.make_node("Concat", ["n2" if decide else "n1", "tail"], ["target"], name="target", axis=0),
              helper.make_node("Reshape", ["h", "target"], ["h3"], name="split_heads"),
              helper.make_node("Relu", ["h3"], ["r"], name="relu"),
              helper.make_node("ReduceSum", ["r", "axes0"], ["y"], name="pool", keepdims=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [1, 16])], [helper.make_tensor_value_info("y", F, [1, 2, 4])],
        [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, "Wx"),
         numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "table"),
         numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "W2"),
         numpy_helper.from_array(np.array(0, np.float32), "zero"), _i64(1, "one"), _i64(0, "zero_i"),
         _i64([0], "axes0"), _i64([2, 4], "tail"), _i64([0], "zero_v"), _i64([1], "one_v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_each_sample_gets_its_own_count_where_a_folded_shape_kept_the_first():
    model = _gathered()
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 16)).astype(np.float32)} for i in range(4)]
    counts = {int((f["x"] @ numpy_helper.to_array(model.graph.initializer[0]) > 0).sum()) for f in feeds}
    assert len(counts) > 1  # the samples select different numbers of rows
    module = torch_module(model, feeds[0])
    import torch

    for feed in feeds:
        with torch.no_grad():
            got = module(torch.from_numpy(feed["x"])).numpy()
        np.testing.assert_allclose(got, ort_outputs(model, feed)[0], rtol=1e-5, atol=1e-5)


def test_torch_export_traces_the_count_and_the_pt2e_path_quantizes_it(tmp_path):
    onnx.save(_gathered(), tmp_path / "nz.onnx")
    tool, samples = pt2e_of_upload(tmp_path / "nz.onnx", tmp_path / "pt2e.onnx", calibration_samples=4, eval_samples=4)
    assert tool.conversion["ops"].get("NonZero") == 1
    written = onnx.load(str(tmp_path / "pt2e.onnx"))
    ops = {n.op_type for n in written.graph.node}
    assert "NonZero" in ops and "QuantizeLinear" in ops  # the whole graph converted, the MatMuls quantized
    import onnxruntime as ort

    session, fp32 = (ort.InferenceSession(str(p)) for p in (tmp_path / "pt2e.onnx", tmp_path / "nz.onnx"))
    for feed in samples.evaluation:
        ref, got = fp32.run(None, feed)[0], session.run(None, feed)[0]
        assert got.shape == ref.shape and np.isfinite(got).all()


def test_a_decision_on_the_count_names_what_the_converter_cannot_carry(tmp_path):
    from service.errors import PathSkipped

    onnx.save(_gathered(decide=True), tmp_path / "nz.onnx")
    with pytest.raises(PathSkipped) as caught:
        pt2e_of_upload(tmp_path / "nz.onnx", tmp_path / "pt2e.onnx")
    message = str(caught.value)
    assert "Reshape node 'split_heads'" in message and "a size the data decides, a NonZero's count" in message
    assert "a comparison feeding a shape" in message
