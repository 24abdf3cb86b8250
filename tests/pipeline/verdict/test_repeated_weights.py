"""A weight stored more than once: the report counts the copies (``file.repeated_initializers``)
and the lint ``repeated_weights`` says so when a quantized file holds more than the upload.

The PT2E file of an upload whose Convs share one weight stored a copy per Conv (the converter's copies
for torchao's annotation rule), where ORT's quantize_static quantizes the shared weight once; the PT2E
path now points every reader at one copy (``own_weights.shared_again``). Pinned in the installed ORT:
ConstantSharing shares scalar initializers only, so every copy would stay in memory; and one copy read
by every reader computes what the copies computed."""
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


def _copied_per_conv(upload, path) -> None:
    """The upload with a copy of its shared weight per Conv, as the converter makes for torchao."""
    from service.pipeline.quantize.pt2e_from_onnx.own_weights import own_weight_copies

    model = onnx.load(str(upload))
    assert own_weight_copies(model, []) == CONVS - 1
    onnx.save(model, str(path))


def test_pt2e_file_of_a_shared_conv_weight_stores_it_once(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.pipeline.files import repeated_initializers
    from service.schemas.options import ComparisonOptions

    _shared_conv(tmp_path / "shared.onnx")
    options = {"artifacts": ["pt2e_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 2,
               "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "shared.onnx", model_name="shared.onnx",
                                              options=ComparisonOptions.model_validate(options)), tmp_path / "job")
    art = report.artifacts["pt2e_qdq"]
    assert art.status == "ok" and art.file.repeated_initializers is None  # was 3 copies of 2.2 KiB
    assert any(f"{CONVS - 1} initializers of the exported file repeated another's bytes" in n
               for n in art.tool.conversion["notes"])
    assert not [lint for lint in report.lints if lint.code == "repeated_weights"]
    model = onnx.load(str(tmp_path / "job" / "artifacts" / "pt2e_qdq.onnx"))
    producer = {o: n for n in model.graph.node for o in n.output}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == CONVS + 1 and all(producer[c.input[1]].op_type == "DequantizeLinear" for c in convs)
    assert len({producer[c.input[1]].input[0] for c in convs}) == 2  # every Conv still int8, two weights
    assert repeated_initializers(model, tmp_path) == []


def _qdq_convs_with_weight_copies(path) -> None:
    """A QDQ chain of CONVS Convs, each reading its own int8 copy of one weight."""
    rng = np.random.default_rng(3)
    w = rng.integers(-60, 60, (16, 16, 3, 3)).astype(np.int8)  # 2.25 KiB: a weight, not a scale
    inits = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "z"),
             numpy_helper.from_array(np.float32(0.01), "ws"), numpy_helper.from_array(np.int8(0), "wz")]
    nodes, prev = [], "x"
    for i in range(CONVS):
        inits.append(numpy_helper.from_array(w.copy(), f"w{i}"))
        nodes += [helper.make_node("QuantizeLinear", [prev, "s", "z"], [f"q{i}"]),
                  helper.make_node("DequantizeLinear", [f"q{i}", "s", "z"], [f"d{i}"]),
                  helper.make_node("DequantizeLinear", [f"w{i}", "ws", "wz"], [f"wd{i}"]),
                  helper.make_node("Conv", [f"d{i}", f"wd{i}"], [f"c{i}"], pads=[1, 1, 1, 1])]
        prev = f"c{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_one_copy_read_by_every_reader_computes_what_the_copies_computed(tmp_path):
    from service.pipeline.files import repeated_initializers
    from service.pipeline.quantize.pt2e_from_onnx.own_weights import shared_again

    _qdq_convs_with_weight_copies(tmp_path / "copies.onnx")
    model = onnx.load(str(tmp_path / "copies.onnx"))
    assert shared_again(model, tmp_path) == (CONVS - 1, (CONVS - 1) * 16 * 16 * 3 * 3)
    assert repeated_initializers(model, tmp_path) == [] and len(model.graph.initializer) == 5
    onnx.save(model, str(tmp_path / "one.onnx"))
    x = np.random.default_rng(2).standard_normal((1, 16, 8, 8)).astype(np.float32)
    outs = [ort.InferenceSession(str(tmp_path / f), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            for f in ("copies.onnx", "one.onnx")]  # ORT's default level: the QLinearConv fusion included
    np.testing.assert_array_equal(outs[0], outs[1])


def test_repeated_weights_lint_names_a_file_with_more_copies_than_the_upload(tmp_path):
    from service.pipeline.inspect.inventory import file_info_from_onnx
    from service.pipeline.verdict.lints import repeated_weight_lints

    _shared_conv(tmp_path / "shared.onnx")
    _copied_per_conv(tmp_path / "shared.onnx", tmp_path / "copied.onnx")
    info = {name: file_info_from_onnx(tmp_path / f, onnx.load(str(tmp_path / f)))
            for name, f in (("shared", "shared.onnx"), ("copied", "copied.onnx"))}
    copied = info["copied"].repeated_initializers
    w_bytes = 16 * 16 * 3 * 3 * 4
    assert (copied.groups, copied.extra_copies, copied.extra_bytes) == (1, CONVS - 1, (CONVS - 1) * w_bytes)
    assert copied.largest[0].copies == CONVS and info["shared"].repeated_initializers is None

    lints = repeated_weight_lints({"fp32": info["shared"], "ort_qdq": info["copied"]})
    assert [(lint.code, lint.artifact) for lint in lints] == [("repeated_weights", "ort_qdq")]
    assert f"{CONVS - 1} extra copies of 1 weight" in lints[0].message and "stores each once" in lints[0].message
    # an upload that already stores those copies: the file adds none, no lint
    assert repeated_weight_lints({"fp32": info["copied"], "ort_qdq": info["copied"]}) == []


def test_the_copies_made_for_a_shared_bias_are_not_blamed_on_the_upload(tmp_path):
    """A bias shared by 20 Gemms gets a copy per reader before ORT quantizes (ort_fixups), and ORT then
    writes one equal int32 zero point per copy: captcha-whisperer's unrolled LSTM read 'stores 197 extra
    copies ... where the upload stores each once', with a hint to change the upload."""
    from service.pipeline.inspect.inventory import file_info_from_onnx
    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_fixups import shared_biases_copied
    from service.pipeline.quantize.ort_quant import quantized_by_ort
    from service.pipeline.verdict.lints import repeated_weight_lints

    rng = np.random.default_rng(0)
    readers = 20
    inits = [numpy_helper.from_array(rng.standard_normal(512).astype(np.float32), "shared_b")]
    nodes = []
    for i in range(readers):
        inits.append(numpy_helper.from_array((rng.standard_normal((8, 512)) * (i + 1)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Gemm", ["x", f"w{i}", "shared_b"], [f"g{i}"], name=f"gemm{i}"))
    nodes.append(helper.make_node("Sum", [f"g{i}" for i in range(readers)], ["y"], name="sum"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "fp32.onnx"))
    assert shared_biases_copied(model) == {"shared_b": readers - 1}
    onnx.save(model, str(tmp_path / "fixed.onnx"))
    feeds = [{"x": rng.standard_normal((1, 8)).astype(np.float32)} for _ in range(4)]
    quantized_by_ort(tmp_path / "fixed.onnx", tmp_path / "ort_qdq.onnx", feeds, ["x"], quant_format="qdq",
                     settings=resolved_ort_settings(ComparisonOptions()))
    info = {name: file_info_from_onnx(tmp_path / f"{name}.onnx", onnx.load(str(tmp_path / f"{name}.onnx")))
            for name in ("fp32", "ort_qdq")}
    repeated = info["ort_qdq"].repeated_initializers
    assert repeated is not None and repeated.extra_bytes >= 0.05 * info["ort_qdq"].size  # worth a lint, if it were the upload's
    assert repeated.extra_bytes_from_bias_copies == repeated.extra_bytes
    assert repeated_weight_lints(info) == []
