"""A weight stored more than once: the report counts the copies (``file.repeated_initializers``)
and the lint ``repeated_weights`` says so when a quantized file holds more than the upload.

The PT2E file of an upload whose Convs share one weight stores a copy per Conv (the converter's copies
for torchao's annotation rule), where ORT's quantize_static quantizes the shared weight once. The
lint's two claims are pinned in the installed ORT: ConstantSharing shares scalar initializers only,
so every copy stays in memory; and pointing each reader at the first copy gives the same outputs."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

CONVS = 4


def _mul_chain(path, shape) -> None:
    """x * c0 * c1 * c2 * c3, the four constants equal, of ``shape``."""
    inits = [numpy_helper.from_array(np.full(shape, 0.5, np.float32), f"c{i}") for i in range(4)]
    nodes = [helper.make_node("Mul", ["x" if i == 0 else f"y{i - 1}", f"c{i}"], [f"y{i}"]) for i in range(4)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y3", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _initializers_after(path, tmp_path, **session_kwargs) -> int:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"], **session_kwargs)
    return len(onnx.load(str(tmp_path / "optimized.onnx")).graph.initializer)


def test_ort_shares_equal_scalar_initializers_only(tmp_path):
    """The lint's "ORT keeps every copy": ConstantSharing merges four equal scalars into one; turned
    off, four stay; four equal [1, 8, 16, 16] tensors stay four at level all."""
    _mul_chain(tmp_path / "scalars.onnx", ())
    assert _initializers_after(tmp_path / "scalars.onnx", tmp_path) == 1
    assert _initializers_after(tmp_path / "scalars.onnx", tmp_path, disabled_optimizers=["ConstantSharing"]) == 4
    _mul_chain(tmp_path / "tensors.onnx", (1, 8, 16, 16))
    assert _initializers_after(tmp_path / "tensors.onnx", tmp_path) == 4


def test_repeated_initializers_compare_bytes_inline_and_in_external_data(tmp_path):
    from service.pipeline.files import REPEATED_MIN_BYTES, repeated_initializers

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 32)).astype(np.float32)  # 2 KiB
    off_by_one = w.copy()
    off_by_one[3, 7] += 1
    small = np.ones(8, np.float32)
    arrays = {"w": w, "w_copy": w.copy(), "w_copy2": w.copy(), "w_other": off_by_one, "w_reshaped": w.reshape(32, 16),
              "s": small, "s_copy": small.copy()}
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [16, 32])], inits)
    model = helper.make_model(graph)
    for external in (False, True):
        if external:
            onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.onnx.data",
                      size_threshold=0)
            model = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
            assert model.graph.initializer[0].data_location == TensorProto.EXTERNAL
        groups = repeated_initializers(model, tmp_path)
        # equal bytes of equal dtype and shape only; small tensors (scales, shapes) are not counted
        assert [(sorted(g.names), g.nbytes) for g in groups] == [(["w", "w_copy", "w_copy2"], w.nbytes)]
        assert small.nbytes < REPEATED_MIN_BYTES <= w.nbytes


def _shared_conv(path) -> None:
    """A stem Conv, then CONVS Convs that read one 16x16x3x3 weight, each followed by Relu."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), n)
             for n, s in (("w0", (16, 3, 3, 3)), ("w", (16, 16, 3, 3)))]
    nodes, prev = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1])], "c0"
    for i in range(1, CONVS + 1):
        nodes += [helper.make_node("Conv", [prev, "w"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _readers_pointed_at_first_copy(model, groups) -> None:
    for g in groups:
        first, rest = g.names[0], set(g.names[1:])
        for node in model.graph.node:
            node.input[:] = [first if i in rest else i for i in node.input]
        kept = [t for t in model.graph.initializer if t.name not in rest]
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)


def test_pt2e_file_of_a_shared_conv_weight_is_counted_and_linted(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.pipeline.files import repeated_initializers
    from service.pipeline.options import ComparisonOptions

    _shared_conv(tmp_path / "shared.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 2,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "shared.onnx", model_name="shared.onnx",
                                              options=options), tmp_path / "job")
    files = {n: a.file for n, a in report.artifacts.items()}
    pt2e = files["pt2e_qdq"].repeated_initializers
    w_int8 = 16 * 16 * 3 * 3
    assert (pt2e.groups, pt2e.extra_copies, pt2e.extra_bytes) == (1, CONVS - 1, (CONVS - 1) * w_int8)
    assert pt2e.largest[0].copies == CONVS and pt2e.largest[0].bytes_each == w_int8
    assert files["fp32"].repeated_initializers is None and files["ort_qdq"].repeated_initializers is None
    lints = [lint for lint in report.lints if lint.code == "repeated_weights"]
    assert [lint.artifact for lint in lints] == ["pt2e_qdq"]
    assert f"{CONVS - 1} extra copies of 1 weight" in lints[0].message and "stores each once" in lints[0].message

    # The hint: one copy read by every reader computes what the file computed, at ORT's default level.
    path = tmp_path / "job" / "artifacts" / "pt2e_qdq.onnx"
    model = onnx.load(str(path))
    _readers_pointed_at_first_copy(model, repeated_initializers(model, path.parent))
    onnx.save(model, str(tmp_path / "one_copy.onnx"))
    assert repeated_initializers(model, tmp_path) == []
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    outs = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            for p in (path, tmp_path / "one_copy.onnx")]
    np.testing.assert_array_equal(outs[0], outs[1])
