"""The converter core on small generated models, ORT as the oracle: shape arithmetic folds away so
torch.export sees static shapes, integer inputs pass through, every missing op is named at once with
counts, and a wrong module is caught by parity with the first diverging tensor named."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.onnx_torch.onnx_parity import ort_outputs
from tests import models

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return models.from_nodes(nodes, inputs, outputs, inits, opset=opset, ir=8)


def _shape_chain_model():
    """x[B, T, 8] -> Reshape(x, Concat(Shape(x)[0], Shape(x)[1] * 2, -1)), as exporters write it."""
    i64 = lambda *v: numpy_helper.from_array(np.array(v, np.int64), f"c{len(v)}_{v[0]}")  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0, name="g0"),
        helper.make_node("Gather", ["s", "one"], ["t"], axis=0, name="g1"),
        helper.make_node("Mul", ["t", "two"], ["t2"], name="mul"),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"], name="u0"),
        helper.make_node("Unsqueeze", ["t2", "ax0"], ["t21"], name="u1"),
        helper.make_node("Concat", ["b1", "t21", "minus1"], ["shape"], axis=0, name="cat"),
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="mm"),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(RNG.standard_normal((4, 3)).astype(np.float32), "w")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return _model(nodes, [x], [y], inits)


def test_shape_arithmetic_folds_and_exports_static():
    import torch

    from onnx_torch.module import build_module
    from service.pipeline.quantize.pt2e_from_onnx.specialize import specialized

    model = _shape_chain_model()
    x = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    spec = specialized(model, {"x": (2, 5, 8)}, fold=False)  # fold=False: the build run alone must fold it
    built = build_module(spec.model, ["x"], {"x": x})
    assert set(built.converted) == {"Reshape", "MatMul"}, built.converted
    assert built.folded["Shape"] == 1 and built.folded["Concat"] == 1
    want = ort_outputs(model, {"x": x})[0]
    program = torch.export.export(built.module, (torch.from_numpy(x),), strict=False)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not any("sym_size" in t or "_local_scalar_dense" in t for t in targets), targets
    np.testing.assert_allclose(program.module()(torch.from_numpy(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_integer_inputs_pass_through():
    from onnx_torch.module import build_module
    import torch

    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0, name="embed"),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Unsqueeze", ["m", "ax"], ["m3"], name="unsq"),
             helper.make_node("Mul", ["e", "m3"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(RNG.standard_normal((10, 4)).astype(np.float32), "emb"),
             numpy_helper.from_array(np.array([-1], np.int64), "ax")]
    model = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6]),
                           helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    feed = {"ids": RNG.integers(0, 10, (1, 6)).astype(np.int64), "mask": RNG.random((1, 6)) < 0.5}
    module = build_module(model, ["ids", "mask"], feed).module
    got = module(torch.from_numpy(feed["ids"]), torch.from_numpy(feed["mask"])).numpy()
    np.testing.assert_allclose(got, ort_outputs(model, feed)[0], rtol=1e-6)


def test_every_missing_op_is_named_at_once_with_counts():
    from onnx_torch.module import MissingConverters, build_module

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"], name="nms"),
             helper.make_node("Cast", ["sel"], ["self"], to=TensorProto.FLOAT, name="c"),
             helper.make_node("ReduceSum", ["self"], ["s"], keepdims=0, name="rs"),
             helper.make_node("Det", ["sq"], ["d1"], name="det1"),
             helper.make_node("Det", ["sq"], ["d2"], name="det2"),
             helper.make_node("Add", ["d1", "d2"], ["d"], name="add")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 3, 4]),
                           helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 3]),
                           helper.make_tensor_value_info("sq", TensorProto.FLOAT, [3, 3])],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "s", "d")], opset=13)
    feed = {"x": np.ones(2, np.float32), "boxes": RNG.random((1, 3, 4)).astype(np.float32),
            "scores": RNG.random((1, 1, 3)).astype(np.float32), "sq": RNG.random((3, 3)).astype(np.float32)}
    with pytest.raises(MissingConverters) as e:
        build_module(model, list(feed), feed)
    assert dict(e.value.missing) == {("ai.onnx", "NonMaxSuppression", 13): 1, ("ai.onnx", "Det", 13): 2}


def test_sequence_ops_without_converters_are_named_not_a_numpy_error():
    """A Sequence value (no converter; the ONNX reference returns a list) cannot be carried as a
    tensor: the build stops there and names the missing ops, constant ones (SequenceEmpty) too."""
    from onnx_torch.module import MissingConverters, build_module

    shapes = {"x": [2, 3], "y": [1, 3]}
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], name="empty"),
             helper.make_node("SequenceInsert", ["s0", "x"], ["s1"], name="ins1"),
             helper.make_node("SequenceInsert", ["s1", "y"], ["s2"], name="ins2"),
             helper.make_node("SequenceAt", ["s2", "pos"], ["out"], name="at")]
    model = _model(nodes, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
                   [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                   [numpy_helper.from_array(np.array(1, np.int64), "pos")], opset=12)
    feed = {n: RNG.random(s).astype(np.float32) for n, s in shapes.items()}
    with pytest.raises(MissingConverters) as e:
        build_module(model, list(feed), feed)
    assert dict(e.value.missing) == {("ai.onnx", "SequenceEmpty", 12): 1, ("ai.onnx", "SequenceInsert", 12): 2,
                                     ("ai.onnx", "SequenceAt", 12): 1}


def test_concat_from_sequence_at_opset_12_converts_after_onnxscript_folding(tmp_path):
    """onnxscript's optimizer rewrites SequenceConstruct + ConcatFromSequence into Unsqueeze(x, axes)
    + Concat even at opset 12, where Unsqueeze takes axes as an attribute: the PT2E path still runs."""
    import onnx
    from pt2e_upload import pt2e_of_upload

    names = ("x", "y", "z")
    nodes = [helper.make_node("SequenceConstruct", list(names), ["seq"], name="construct"),
             helper.make_node("ConcatFromSequence", ["seq"], ["out"], axis=-1, new_axis=1, name="concat")]
    model = _model(nodes, [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 4]) for n in names],
                   [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, 4, 3])], opset=12)
    onnx.save(model, tmp_path / "m.onnx")
    tool, _ = pt2e_of_upload(tmp_path / "m.onnx", tmp_path / "pt2e.onnx", calibration_samples=2, eval_samples=1)
    assert tool.conversion["parity"]["ok"], tool.conversion["parity"]


def test_constant_node_without_converter_folds_with_the_reference():
    from onnx_torch.module import build_module

    nodes = [helper.make_node("Det", ["m"], ["d"], name="det"),  # no converter, but its input is constant
             helper.make_node("Mul", ["x", "d"], ["y"], name="mul")]
    m = RNG.random((3, 3)).astype(np.float32)
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(m, "m")])
    built = build_module(model, ["x"], {"x": np.ones(2, np.float32)})
    assert built.folded["Det"] == 1
    import torch

    got = built.module(torch.ones(2)).numpy()
    np.testing.assert_allclose(got, ort_outputs(model, {"x": np.ones(2, np.float32)})[0], rtol=1e-5)


def test_parity_names_the_first_diverging_tensor(tmp_path):
    import onnx
    import torch

    from onnx_torch.module import build_module
    from service.pipeline.quantize.pt2e_from_onnx.parity import parity_vs_onnx

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "w2"], ["y"], name="fc2")]
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 5)).astype(np.float32), "w1"),
             numpy_helper.from_array(RNG.standard_normal((5, 3)).astype(np.float32), "w2")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    feed = {"x": RNG.standard_normal((2, 4)).astype(np.float32)}
    module = build_module(model, ["x"], feed).module
    good = parity_vs_onnx(module, path, ["x"], [feed], specialized_model=model)
    assert good.ok and good.max_abs_error < 1e-5
    with torch.no_grad():  # a fault in the module: the second layer's weight is off
        getattr(module, next(a for a, n in module.onnx_names.items() if n == "w2")).mul_(1.5)
    bad = parity_vs_onnx(module, path, ["x"], [feed], specialized_model=model)
    assert not bad.ok
    assert bad.first_diverging.startswith("'y' (output of MatMul node 'fc2'"), bad.first_diverging
    assert "output 'y'" in bad.reason


def test_report_of_an_upload_with_missing_ops_names_them_all_and_keeps_the_conversion(tmp_path):
    """Through the whole job: PT2E is skipped naming every missing op with counts, the artifact still
    carries tool.conversion, and the ORT path goes on."""
    import onnx

    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("Det", ["h"], ["d1"], name="det1"),
             helper.make_node("Sin", ["h"], ["h2"], name="sin"),
             helper.make_node("Det", ["h2"], ["d2"], name="det2"),
             helper.make_node("Add", ["d1", "d2"], ["y"], name="add")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                   [numpy_helper.from_array(RNG.standard_normal((3, 3)).astype(np.float32), "w")], opset=13)
    path = tmp_path / "det.onnx"
    onnx.save(model, path)
    options = ComparisonOptions.model_validate({"artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"],
                                                "calibration_samples": 2, "eval_samples": 1,
                                                "latency": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, options=options), tmp_path / "job")
    pt2e = report.artifacts["pt2e_qdq"]
    assert pt2e.status == "skipped"
    assert "Det (opset 13) x2" in pt2e.error.message and "no ONNX -> torch converter" in pt2e.error.message
    assert pt2e.tool is not None and pt2e.tool.conversion["converter"].startswith("quantcompare onnx_torch")
    assert report.artifacts["ort_qdq"].status == "ok"


def test_eager_runs_hold_the_live_tensors_not_every_tensor_of_the_network():
    """The build run and forward drop a value once its last reader ran (If bodies' outer reads count),
    so an eager run of a deep network holds a few activations, not all of them."""
    import torch

    from onnx_torch import module as module_core

    depth = 24
    nodes = [helper.make_node("Relu" if k % 2 else "Neg", [f"t{k}"], [f"t{k + 1}"], name=f"n{k}") for k in range(depth)]
    # t1 is read again at the end through an If body's outer scope: it must stay alive until then.
    then_g = models.branch("Add", [f"t{depth}", "t1"], "z", [2, 3])
    else_g = models.branch("Sub", [f"t{depth}", "t1"], "w", [2, 3])
    nodes.append(helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g, name="if"))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t0"], name="in")] + nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    live: list[int] = []
    real_run_node = module_core.GraphRunner.run_node

    def counting(self, node, scope, *, main):
        if main:
            live.append(len(scope.values))
        return real_run_node(self, node, scope, main=main)

    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    feed = {"x": x, "flag": np.array(True)}
    module_core.GraphRunner.run_node = counting
    try:
        built = module_core.build_module(model, ["x", "flag"], feed)
        build_peak = max(live)
        live.clear()
        with torch.no_grad():
            got = built.module(torch.from_numpy(x), torch.tensor(True))
        forward_peak = max(live)
    finally:
        module_core.GraphRunner.run_node = real_run_node
    np.testing.assert_allclose(got.numpy(), ort_outputs(model, feed)[0], rtol=1e-6)
    assert build_peak <= 4 and forward_peak <= 4, (build_peak, forward_peak)  # x, flag, t1 and one more
