"""Lints from file facts and per-level summaries, for CPUs other than this one."""

from __future__ import annotations

import pytest

from service.pipeline.runtime.levels import FileFacts
from service.pipeline.runtime.levels import LevelsResult
from service.pipeline.verdict.lints import levels_lints
from service.schemas.options import ComparisonOptions
from service.schemas.levels import OptimizedLevel
from service.schemas.report import CpuInfo

AVX2_NO_VNNI = CpuInfo(arch="x86_64", isa={"avx2": True, "avx512_vnni": False, "avx_vnni": False})
VNNI = CpuInfo(arch="x86_64", isa={"avx2": True, "avx512_vnni": True})
ARM = CpuInfo(arch="aarch64", isa={"neon": True, "dotprod": True})


def _facts(*, opset=17, per_channel=True, zp_equal=True, acts=("int8",), kernels=None, hist=None):
    w = {"name": "w", "dtype": "int8", "consumer": "Conv", "per_channel": per_channel, "symmetric": zp_equal,
         "zero_points_equal": zp_equal}
    hist = {"QuantizeLinear": 2, "DequantizeLinear": 3, "Conv": 1} if hist is None else hist
    return FileFacts(opset=opset, op_histogram=hist, bias_summary="int32", weights=[w], activation_dtypes=list(acts),
                     int8_kernels=kernels or {}, transposes=0)


def _levels_of(files, optimized) -> LevelsResult:
    return LevelsResult(optimized={name: optimized.get(name, {}) for name in files}, agreement=[], timings={},
                        files=files)


def _levels(u8=True):
    return {"all": OptimizedLevel(level="all", node_count=3, compute_ops_fp32=1, compute_ops_int8=1,
                                  int8_coverage=1.0, kernel_activation_dtypes={"uint8" if u8 else "int8": 1})}


def _codes(name, facts, levels, cpu, **opts):
    return [lint.code for lint in levels_lints(_levels_of({name: facts}, {name: levels}), ComparisonOptions(**opts), cpu)]


@pytest.mark.parametrize("cpu,expected", [(AVX2_NO_VNNI, True), (VNNI, False), (ARM, False)],
                         ids=["avx2 without vnni warns", "vnni does not", "arm does not"])
def test_u8s8_saturation_only_without_vnni(cpu, expected):
    assert ("u8s8_saturation_without_vnni" in _codes("ort_qdq", _facts(), _levels(), cpu)) is expected


def test_reduce_range_silences_the_saturation_lint():
    assert "u8s8_saturation_without_vnni" not in _codes("ort_qdq", _facts(), _levels(), AVX2_NO_VNNI,
                                                        ort={"reduce_range": True})


def test_per_channel_below_opset_13_is_an_error():
    lints = levels_lints(_levels_of({"pt2e_qdq": _facts(opset=11)}, {"pt2e_qdq": _levels()}), ComparisonOptions(), VNNI)
    lint = next(x for x in lints if x.code == "per_channel_below_opset_13")
    assert lint.severity == "error" and "opset" in lint.hint


def test_asymmetric_per_channel_conv_weights():
    assert "asymmetric_per_channel_conv_weights" in _codes("ort_qdq", _facts(zp_equal=False), _levels(), VNNI)


def test_qoperator_int8_only_on_x86():
    facts = _facts(kernels={"QLinearConv": 1})
    assert "qoperator_int8_activations_x86" in _codes("ort_qoperator", facts, _levels(u8=False), VNNI)
    assert "qoperator_int8_activations_x86" not in _codes("ort_qoperator", facts, _levels(u8=False), ARM)


def test_no_int8_kernels_is_reported():
    levels = {"all": OptimizedLevel(level="all", node_count=5, compute_ops_fp32=2, int8_coverage=0.0)}
    assert "no_int8_kernels" in _codes("pt2e_qdq", _facts(), levels, VNNI)


def test_a_file_the_tool_quantized_nothing_in_is_flagged():
    """A tree ensemble (atspm-detector's LightGBM files): quantize_static writes the model back as is."""
    tree = _facts(hist={"ai.onnx.ml.TreeEnsemble": 1}, acts=(), kernels={})
    lint = next(x for x in levels_lints(_levels_of({"ort_qdq": tree}, {"ort_qdq": {}}),
                                        ComparisonOptions(), VNNI) if x.code == "nothing_quantized")
    assert "TreeEnsemble x1" in lint.message and lint.artifact == "ort_qdq"
    assert "nothing_quantized" not in _codes("ort_qdq", _facts(), _levels(), VNNI)
    assert "nothing_quantized" not in _codes("ort_qoperator", _facts(hist={"QLinearConv": 1}, kernels={"QLinearConv": 1}),
                                             _levels(), VNNI)


def _bn_model(path, *, cancelled: bool) -> None:
    """Conv -> BatchNormalization, then either Relu, or minus the same Conv with the BN folded in by
    hand: y is then a difference of two nearly equal tensors, pure float rounding (~1e-6)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    g, b = (rng.random(8) + 0.5).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    m, v = rng.standard_normal(8).astype(np.float32), (rng.random(8) + 0.5).astype(np.float32)
    k = g / np.sqrt(v + 1e-5)
    inits = {"w": w, "g": g, "b": b, "m": m, "v": v}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["bn"], name="bn")]
    if cancelled:
        inits.update(w2=(w * k[:, None, None, None]).astype(np.float32), b2=(b - m * k).astype(np.float32))
        nodes += [helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], name="folded"),
                  helper.make_node("Sub", ["bn", "c2"], ["y"], name="sub")]
    else:
        nodes.append(helper.make_node("Relu", ["bn"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("cancelled", [True, False], ids=["rounding-noise output warns", "a real output does not"])
def test_an_output_that_ort_s_float_rewrites_move_like_quantization_is_flagged(tmp_path, cancelled):
    """ORT's ConvBNFusion (basic) changes the float rounding of BN(Conv(x)); on an output that is only
    rounding (a difference of two equal tensors), fp32 at basic is then ~0 dB from fp32 as written, and
    the quantized SQNR of that output would compare noise. The lint quotes the measured fp32 figure."""
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.pipeline.verdict.reference_noise import CODE

    (tmp_path / "input").mkdir()
    model = tmp_path / "input" / "model.onnx"
    _bn_model(model, cancelled=cancelled)
    options = ComparisonOptions(artifacts=["ort_qdq"], levels=["disable_all", "basic"], calibration_samples=2,
                                eval_samples=2, latency={"enabled": False}, advice={"enabled": False},
                                layers={"enabled": False})
    report = run_comparison(ComparisonRequest(options=options, model_path=model, model_name="bn"), tmp_path)
    fp32_basic = report.artifacts["fp32"].optimized["basic"].numerics.worst_sqnr_db
    lints = [lint for lint in report.lints if lint.code == CODE]
    if cancelled:
        assert fp32_basic is not None and fp32_basic < 10
        # and it is ConvBNFusion (docs/report.md names it): with that one rewrite off, basic equals disable_all
        import numpy as np
        import onnxruntime as ort

        x = {"x": np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32)}

        def run(level, disabled=()):
            so = ort.SessionOptions()
            so.graph_optimization_level = level
            return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"],
                                        disabled_optimizers=list(disabled)).run(None, x)[0]

        plain = run(ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        assert not np.array_equal(run(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), plain)
        assert np.array_equal(run(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, ["ConvBNFusion"]), plain)
        assert len(lints) == 1 and "fp32 at level basic" in lints[0].message and "'y'" in lints[0].message
        assert "largest |value|" in lints[0].message
    else:
        assert fp32_basic is None or fp32_basic > 100
        assert lints == []


def _conv_model(path, *, in_if: bool) -> None:
    """One Conv, in the main graph or as both branches of an If on the input's mean."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    if in_if:
        from tests import models

        branch = [models.branch("Conv", ["x", "w"], o, [1, 4, 8, 8], pads=[1, 1, 1, 1]) for o in ("t", "e")]
        nodes = [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0), helper.make_node("Greater", ["m", "zero"], ["c"]),
                 helper.make_node("If", ["c"], ["y"], then_branch=branch[0], else_branch=branch[1])]
    else:
        nodes = [conv]
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_quantize_static_leaves_if_bodies_alone_and_the_lint_says_so(tmp_path, fmt):
    """In the installed ORT: the same Conv is quantized in the main graph and left float inside an If
    body (EnableSubgraph off, as quantize_static defaults it); the lint names the body's Conv and why."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from service.pipeline.runtime.levels import file_facts_from_graph
    from service.pipeline.vocabulary import graph_from_path

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": np.random.default_rng(k).standard_normal((1, 3, 8, 8)).astype(np.float32)}
                               for k in range(2)])

        def get_next(self):
            return next(self.feeds, None)

    facts = {}
    for in_if in (False, True):
        src, out = tmp_path / f"m{in_if}.onnx", tmp_path / f"q{in_if}.onnx"
        _conv_model(src, in_if=in_if)
        quantize_static(str(src), str(out), Reader(), quant_format=getattr(QuantFormat, fmt))
        facts[in_if] = file_facts_from_graph(graph_from_path(out))
    art = "ort_qdq" if fmt == "QDQ" else "ort_qoperator"
    assert "nothing_quantized" not in _codes(art, facts[False], _levels(), VNNI)
    assert facts[True].subgraph_compute_ops == {"Conv": 2} and facts[False].subgraph_compute_ops == {}
    lint = next(x for x in levels_lints(_levels_of({art: facts[True]}, {art: {}}),
                                        ComparisonOptions(), VNNI) if x.code == "nothing_quantized")
    assert "Conv x2 sit inside If/Loop/Scan bodies" in lint.message and "EnableSubgraph" in lint.source


@pytest.mark.parametrize("gain", [200.0, 0.5])
def test_a_softmax_saturated_by_the_samples_is_said_to_count_flips(tmp_path, gain):
    """A captcha reader's softmax heads came out exactly one-hot on normal(0, 1) images: fp32 read 341 dB
    against itself and PT2E 234-868 dB, with no word about it. The one condition: how large the logits are."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.pipeline.verdict.reference_noise import SATURATED_CODE

    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((16, 10)) * gain).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"], name="fc"),
                               helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="sm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [4, 10])], [w])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    options = ComparisonOptions(artifacts=["ort_qdq"], levels=["disable_all"], calibration_samples=2, eval_samples=2,
                                latency={"enabled": False}, advice={"enabled": False}, layers={"enabled": False})
    report = run_comparison(ComparisonRequest(options=options, model_path=model, model_name="m"), tmp_path / "job")
    lints = [lint for lint in report.lints if lint.code == SATURATED_CODE]
    if gain > 1:
        assert len(lints) == 1 and "output 'probs' holds only 2 distinct value(s) (0, 1)" in lints[0].message
        assert "input_values" in lints[0].hint
    else:
        assert not lints


@pytest.mark.parametrize("zeros", [0.994, 0.90])
def test_an_output_at_one_value_almost_everywhere_is_said_to_be_decided_elsewhere(zeros):
    """PP-OCRv4's detector on random images: a sigmoid map 99.4% at 0 with 317 other values read "ok" at
    -20 dB with no word; the lint counted distinct values only."""
    import numpy as np

    from service.pipeline.verdict.reference_noise import SATURATED_CODE, saturated_reference_lints

    rng = np.random.default_rng(0)
    ref = np.zeros(10000, np.float32)
    k = int(round((1 - zeros) * ref.size))
    ref[:k] = rng.uniform(0.01, 1.0, k)
    lints = saturated_reference_lints({}, [ref.reshape(1, 1, 100, 100)])
    if zeros > 0.99:
        assert [x.code for x in lints] == [SATURATED_CODE] and "one value (0) at 99.4%" in lints[0].message
    else:
        assert not lints


def _int8_qdq_conv():
    """x -> Q/DQ (int8) -> Conv(DQ int8 weight, DQ int32 bias) -> Q/DQ: a QDQ upload's unit."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    sx, sw = np.float32(0.0371), rng.uniform(1e-3, 3e-3, 16).astype(np.float32)
    inits = [numpy_helper.from_array(sx, "s"), numpy_helper.from_array(np.int8(0), "z"),
             numpy_helper.from_array(rng.integers(-127, 127, (16, 32, 3, 3)).astype(np.int8), "wq"),
             numpy_helper.from_array(sw, "ws"), numpy_helper.from_array(np.zeros(16, np.int8), "wz"),
             numpy_helper.from_array(rng.integers(-3000, 3000, 16).astype(np.int32), "bq"),
             numpy_helper.from_array((sx * sw).astype(np.float32), "bs"), numpy_helper.from_array(np.zeros(16, np.int32), "bz"),
             numpy_helper.from_array(np.float32(0.0173), "so")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["b"], axis=0),
             helper.make_node("Conv", ["xd", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "so", "z"], ["cq"]), helper.make_node("DequantizeLinear", ["cq", "so", "z"], ["y"])]
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_already_quantized_upload_s_int8_kernels_are_not_called_sample_noise():
    """EfficientWord-Net's slim_..._qint8.onnx (a QDQ upload, int8 activations): fp32 at extended read 22.7
    dB from the file as written (one of two samples: every element of the L2-normalized embedding moved),
    and the lint said the samples may not exercise the model. At extended ORT runs the upload's Q/DQ as
    int8 kernels (QDQS8ToU8Transformer, then QLinearConv), which can round an element the other way than
    the float simulation of disable_all; the effwq difference vanished with either switched off.

    Pinned on one int8 QDQ Conv: on some of 20 inputs extended differs from disable_all, and with the QDQ
    fusions off (session.disable_quant_qdq) it never does. Then the lint on such levels."""
    import numpy as np
    import onnxruntime as ort

    from service.pipeline.verdict.reference_noise import CODE, unstable_reference_lints
    from service.schemas.levels import LevelNumerics, OutputNumerics

    model = _int8_qdq_conv().SerializeToString()

    def session(level, fusion=True):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        if not fusion:
            so.add_session_config_entry("session.disable_quant_qdq", "1")
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    plain, fused = session(ort.GraphOptimizationLevel.ORT_DISABLE_ALL), session(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    unfused = session(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, fusion=False)
    rng = np.random.default_rng(0)
    moved = kept = 0
    for _ in range(20):
        x = {"x": rng.standard_normal((1, 32, 16, 16)).astype(np.float32)}
        ref = plain.run(None, x)[0]
        moved += int((fused.run(None, x)[0] != ref).sum())
        kept += int((unfused.run(None, x)[0] != ref).sum())
    assert moved > 0 and kept == 0

    def level(name, kernels):
        out = OutputNumerics(name="feature_output", reference="feature_output", sqnr_db=22.7, cosine=0.99, max_abs_error=0.01)
        return OptimizedLevel(level=name, int8_kernels=kernels, numerics=LevelNumerics(
            outputs=[out], worst_sqnr_db=22.7, worst_cosine=0.99, worst_max_abs_error=0.01, samples=2))

    quantized = unstable_reference_lints({"extended": level("extended", {"QLinearConv": 33})}, None)
    assert [l.code for l in quantized] == [CODE] and "quantized already" in quantized[0].message
    assert "QLinearConv x33" in quantized[0].message and "may not exercise" not in quantized[0].hint
    floating = unstable_reference_lints({"basic": level("basic", {})}, None)
    assert "may not exercise" in floating[0].hint  # a float upload keeps the samples' reading


def test_a_job_that_set_ort_session_entries_says_its_figures_need_them():
    """options.ort_session changes what ORT does (pinned in tests/pipeline/runtime/test_levels.py): the report says
    so in one info lint, and names the int8 rule it changed where it did (x86: not allowed by default)."""
    from service.pipeline.ort.targets import host_platform

    assert "ort_session_entries" not in _codes("ort_qdq", _facts(), _levels(), VNNI)
    levels = _levels_of({"ort_qdq": _facts()}, {"ort_qdq": _levels()})
    options = ComparisonOptions(ort_session={"session.qdqisint8allowed": "1"})
    lint = next(x for x in levels_lints(levels, options, VNNI) if x.code == "ort_session_entries")
    assert lint.severity == "info" and "session.qdqisint8allowed=1" in lint.message
    assert ("change ORT's int8 rule" in lint.message) is (not host_platform().int8_allowed)
