"""arm64 as emulated ORT (issue 41): the aarch64 onnxruntime wheel under qemu-user, set up by `make`.

The oracles are ORT's own saved graphs: the emulated ORT's, and this machine's ORT with
``session.qdqisint8allowed=1`` (``kOrtSessionOptionsQDQIsInt8Allowed``,
include/onnxruntime/core/session/onnxruntime_session_options_config_keys.h), the switch that gives
the QDQ selectors arm64's behaviour on another CPU.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.platforms.emulated_levels import platform_levels
from service.pipeline.platforms.runner_io import samples_npz
from service.pipeline.platforms.runtime import emulated_run
from service.pipeline.ort.targets import host_platform, platform_from_name
from service.pipeline.runtime.levels import file_facts_from_graph
from service.pipeline.runtime.numerics import max_abs_error, sqnr_db
from service.pipeline.vocabulary import graph_from_path, op_key
from service.schemas.options import ComparisonOptions

ARM64 = platform_from_name("arm64")
pytestmark = pytest.mark.skipif(host_platform().int8_allowed, reason="this machine is ARM: nothing is emulated")


def residual_fp32(path: Path, blocks: int = 2, channels: int = 4) -> Path:
    """Conv+Relu, then ``blocks`` residual blocks (Conv -> Relu -> Conv, + skip, Relu): every block's
    input has two readers, which is what keeps x86's int8 Q/DQ int8 and its Add/Conv float."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def conv(x, name, relu):
        w = numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.2).astype(np.float32), f"{name}_w")
        b = numpy_helper.from_array((rng.standard_normal(channels) * 0.1).astype(np.float32), f"{name}_b")
        inits.extend([w, b])
        nodes.append(helper.make_node("Conv", [x, w.name, b.name], [f"{name}_y"], name=name, pads=[1, 1, 1, 1]))
        if not relu:
            return f"{name}_y"
        nodes.append(helper.make_node("Relu", [f"{name}_y"], [f"{name}_r"], name=f"{name}_relu"))
        return f"{name}_r"

    h = conv("x", "stem", True)
    for i in range(blocks):
        y = conv(conv(h, f"b{i}c1", True), f"b{i}c2", False)
        nodes.append(helper.make_node("Add", [y, h], [f"b{i}_sum"], name=f"b{i}_add"))
        nodes.append(helper.make_node("Relu", [f"b{i}_sum"], [f"b{i}_out"], name=f"b{i}_relu"))
        h = f"b{i}_out"
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 8, 8])],
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def feeds(n: int, channels: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((1, channels, 8, 8)).astype(np.float32)} for _ in range(n)]


def ort_qdq(fp32: Path, out: Path) -> Path:
    """ORT's quantize_static, QDQ, int8 activations and weights (the service's ``matched`` preset)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds(4))

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(fp32), str(out), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=False)
    return out


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    d = tmp_path_factory.mktemp("residual")
    fp32 = residual_fp32(d / "fp32.onnx")
    return {"fp32": fp32, "ort_qdq": ort_qdq(fp32, d / "ort_qdq.onnx")}


@pytest.fixture(scope="module")
def arm64_report(residual, tmp_path_factory):
    out = tmp_path_factory.mktemp("arm64")
    options = ComparisonOptions(platforms=["arm64"], levels=["disable_all", "extended", "all"])
    files = {n: file_facts_from_graph(graph_from_path(p)) for n, p in residual.items()}
    return platform_levels(ARM64, artifact_paths=residual, eval_feeds=feeds(3), out_dir=out, options=options,
                           levels=["disable_all", "extended", "all"], files=files), out


def _native_extended(path: Path, out: Path, int8_allowed: bool) -> Counter:
    import onnxruntime as ort

    from service.pipeline.ort.sessions import session_options_for

    so = session_options_for("extended", optimized_model_path=out)
    if int8_allowed:
        so.add_session_config_entry("session.qdqisint8allowed", "1")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return Counter(op_key(n) for n in onnx.load(str(out)).graph.node)


def test_on_arm64_ort_qdq_of_a_residual_net_fuses_every_conv_and_add_at_extended(arm64_report, residual, tmp_path):
    report, _ = arm64_report
    assert report.status == "ok" and report.onnxruntime == "1.32.0"
    ext = report.optimized["ort_qdq"]["extended"]
    hist = Counter(ext.op_histogram)
    # 5 Convs, 2 residual Adds in the model: all int8 kernels, no float Conv or Add left.
    assert hist["QLinearConv"] == 5 and hist["com.microsoft.QLinearAdd"] == 2
    assert hist["Conv"] == 0 and hist["Add"] == 0 and ext.int8_coverage == 1.0
    assert ext.kernel_activation_dtypes == {"int8": 7}
    # The oracle: this machine's ORT with arm64's selector switch writes the same kernels at the same level...
    allowed = _native_extended(residual["ort_qdq"], tmp_path / "allowed.onnx", int8_allowed=True)
    assert {k: v for k, v in hist.items() if k.startswith(("QLinear", "com.microsoft.QLinear"))} == \
        {k: v for k, v in allowed.items() if k.startswith(("QLinear", "com.microsoft.QLinear"))}
    # ...and without it (x86's default, QDQS8ToU8Transformer) the shared tensors keep Convs and Adds float.
    x86 = _native_extended(residual["ort_qdq"], tmp_path / "x86.onnx", int8_allowed=False)
    assert x86["Add"] + x86["Conv"] > 0


def test_the_arm64_blockers_are_read_under_arm64s_rules(arm64_report):
    report, _ = arm64_report
    assert report.rules.int8_allowed and not report.rules.nchwc
    for level in ("extended", "all"):
        rows = report.optimized["ort_qdq"][level].unfused
        assert not [r for r in rows if r.blocker in ("int8_activation_on_x86", "io_dtype_mismatch")]
    assert not any(ol.layout.nchwc_nodes for per in report.optimized.values() for ol in per.values())


def test_accuracy_on_arm64_equals_a_direct_emulated_ort_run_on_the_same_samples(arm64_report, residual, tmp_path):
    report, _ = arm64_report
    assert report.accuracy.samples_run == 3 == report.accuracy.samples_total
    assert report.latency == "not measured: emulated"
    # A direct run: the emulated ORT on the same file and samples, the report's code path not involved.
    samples = samples_npz(feeds(3), tmp_path / "samples.npz")
    answer = emulated_run(ARM64, {"artifacts": [{"name": "q", "path": str(residual["ort_qdq"]), "run": True}],
                                  "levels": [["extended", 2]], "out_dir": str(tmp_path / "direct"),
                                  "samples": str(samples), "budget_seconds": 120}, timeout_s=600)
    with np.load(answer["artifacts"]["q"]["extended"]["outputs_file"]) as z:
        direct = np.concatenate([z[f"{i}/0"] for i in range(3)])
    from service.pipeline.ort.sessions import session_for

    fp32 = session_for(residual["fp32"], "disable_all")  # the report's reference: fp32 here at the first level run
    ref = np.concatenate([fp32.run(None, f)[0] for f in feeds(3)])
    got = report.optimized["ort_qdq"]["extended"].numerics.outputs[0]
    assert got.sqnr_db == sqnr_db(ref, direct) and got.max_abs_error == max_abs_error(ref, direct)


def test_the_level_graphs_are_stored_as_the_emulated_ort_saved_them(arm64_report):
    report, out = arm64_report
    ol = report.optimized["ort_qdq"]["extended"]
    assert ol.file == "ort_qdq.extended.arm64.onnx" and (out / ol.file).exists()
    assert Counter(op_key(n) for n in onnx.load(str(out / ol.file)).graph.node) == Counter(ol.op_histogram)


def test_a_missing_arm64_runtime_refuses_the_platform_with_a_stable_code(residual, tmp_path):
    files = {n: file_facts_from_graph(graph_from_path(p)) for n, p in residual.items()}
    report = platform_levels(ARM64, artifact_paths=residual, eval_feeds=feeds(1), out_dir=tmp_path,
                             options=ComparisonOptions(platforms=["arm64"]), levels=["extended"], files=files,
                             root=tmp_path / "no-runtime-here")
    assert report.status == "unavailable" and report.error.code == "platform_unavailable"
    assert "make" in report.error.hint and not report.optimized
