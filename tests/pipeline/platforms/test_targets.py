"""Targets of options.platforms (issue 49) on a tiny Conv net with a dynamic batch dim: Qualcomm's HTP through
the QNN EP (emulated on x86), OpenVINO's CPU plugin, and ONNX Runtime 1.22.1, each set up by `make` under
.venv/targets.

The oracles are the targets themselves, driven directly by the scripts below (not the product's code), in a
child process with the target's wheels first on the path: QNN's op trace and outputs, OpenVINO's runtime model
and outputs, ORT 1.22.1's saved graph. Each SQNR is computed here with numpy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from service.pipeline.ort.targets import host_platform, platform_from_name
from service.pipeline.platforms.targets.compiled import compiled_target_report
from service.pipeline.platforms.emulated_levels import platform_levels
from service.pipeline.platforms.targets.lints import target_lints
from service.pipeline.platforms.targets.install import targets_root
from service.pipeline.runtime.levels import LevelsInput
from service.schemas.options import ComparisonOptions
from tests import models
from tests.pipeline.platforms.host_levels import host_levels

pytestmark = pytest.mark.skipif(host_platform().arch not in ("x86_64", "AMD64"),
                                reason="the QNN wheel and the measured behaviour are x86-64 Linux")
LEVELS = ["disable_all", "extended", "layout", "all"]
OPTIONS = ComparisonOptions(levels=LEVELS, platforms=["qnn:69"])


def feeds(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


def sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    err = float(np.sum((ref.astype(np.float64) - got) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / err)


def _quantized(fp32: Path, out: Path, fmt: str, per_channel: bool) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds(4))

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(fp32), str(out), Reader(), quant_format=getattr(QuantFormat, fmt),
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=per_channel)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Conv(3->8, 3x3) + Relu -> Conv(8->8, 3x3), input [batch, 3, 16, 16] with ``batch`` left free."""
    d = tmp_path_factory.mktemp("tiny")
    model = models.conv_chain(2, channels=[3, 8, 8], size=16, kernel=3, pads=1, last_act=False, scale=0.3, ir=8)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, d / "fp32.onnx")
    return {"fp32": d / "fp32.onnx", "ort_qdq": _quantized(d / "fp32.onnx", d / "ort_qdq.onnx", "QDQ", False),
            "ort_qoperator": _quantized(d / "fp32.onnx", d / "ort_qoperator.onnx", "QOperator", True)}


def _host_fp32(tiny, n: int) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(tiny["fp32"]), so, providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, f)[0] for f in feeds(n)])


def _oracle(site: str, script: str, tmp: Path, **args) -> dict:
    """``script`` in a child process with ``site`` first on the path; it writes its answer as JSON."""
    (tmp / "oracle.py").write_text(script)
    (tmp / "args.json").write_text(json.dumps({**args, "out": str(tmp / "answer.json")}))
    subprocess.run([sys.executable, str(tmp / "oracle.py"), str(tmp / "args.json")], check=True, cwd=tmp,
                   env={"PYTHONPATH": str(targets_root() / site), "PATH": "/usr/bin:/bin"}, stdout=subprocess.DEVNULL)
    return json.loads((tmp / "answer.json").read_text())


QNN_ORACLE = """
import json, sys, numpy as np, onnxruntime as ort, onnxruntime_qnn as qnn
a = json.load(open(sys.argv[1]))
ort.register_execution_provider_library("QNNExecutionProvider", qnn.get_library_path())
dev = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"][:1]
so = ort.SessionOptions(); so.intra_op_num_threads = 1
if a["fix"]:
    so.add_free_dimension_override_by_name("batch", 1)
so.add_provider_for_devices(dev, {"backend_path": qnn.get_qnn_htp_path(), "soc_model": "69",
                                  "enable_framework_op_trace": "1", "framework_op_trace_dir": a["trace"]})
try:
    s = ort.InferenceSession(a["model"], so)
except Exception as e:
    json.dump({"error": str(e)}, open(a["out"], "w")); sys.exit(0)
rng = np.random.default_rng(1)
xs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(a["n"])]
y = np.concatenate([s.run(None, {"x": x})[0] for x in xs])
np.save(a["trace"] + "/y.npy", y)
json.dump(json.load(open(a["trace"] + "/qnn_op_trace.json"))["summary"], open(a["out"], "w"))
"""


@pytest.fixture(scope="module")
def qnn_report(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("qnn")
    return compiled_target_report(platform_from_name("qnn:69"), LevelsInput(tiny, feeds(3), OPTIONS), out), out


@pytest.mark.parametrize("artifact", ["fp32", "ort_qdq"])
def test_qnn_compile_status_nodes_taken_and_accuracy_equal_a_direct_qnn_run(qnn_report, tiny, artifact, tmp_path):
    report, out = qnn_report
    trace = tmp_path / "trace"
    trace.mkdir()
    direct = _oracle("qnn", QNN_ORACLE, tmp_path, model=str(tiny[artifact]), trace=str(trace), fix=True, n=3)
    art = report.artifacts[artifact]
    assert report.status == "ok" and art.status == "ok" and art.fallback is None
    assert (art.nodes_taken, art.nodes_total) == (direct["supported_nodes"], direct["total_onnx_nodes"])
    assert len(art.nodes_left) == direct["unsupported_nodes"]
    worst = art.numerics.worst_sqnr_db
    assert worst == pytest.approx(sqnr(_host_fp32(tiny, 3), np.load(trace / "y.npy")), abs=1e-6)
    assert report.latency.startswith("not measured") and art.latency is None  # emulation: never a latency
    assert art.context_binary and all((out / f).is_file() for f in art.context_binary)  # the deployable binary


def test_a_dynamic_batch_dim_is_fixed_from_the_samples_so_qnn_takes_the_graph(qnn_report, tiny, tmp_path):
    """Left free, the dim makes QNN take nothing and ORT run it all on its CPU EP without a word (the oracle
    shows it); the product fixes it from the job's samples and reports what QNN really took."""
    trace = tmp_path / "trace"
    trace.mkdir()
    free = _oracle("qnn", QNN_ORACLE, tmp_path, model=str(tiny["ort_qdq"]), trace=str(trace), fix=False, n=1)
    assert free["supported_nodes"] == 0
    art = qnn_report[0].artifacts["ort_qdq"]
    assert art.free_dims == {"batch": 1} and art.nodes_taken > 0


def test_a_qnn_backend_that_does_not_load_is_a_silent_fallback_said_as_such(tiny, tmp_path):
    """libQnnCpu.so is not in onnxruntime-qnn 2.7.0: the session is created and runs everything on the CPU EP."""
    report = compiled_target_report(platform_from_name("qnn:69"), LevelsInput({"fp32": tiny["fp32"]}, feeds(1), OPTIONS),
                                    tmp_path, backend="cpu")
    art = report.artifacts["fp32"]
    assert art.status == "failed" and art.fallback.startswith("silent fallback: QNN's backend did not run")
    assert "libQnnCpu.so" in art.fallback and art.numerics is None
    assert [lint.code for lint in target_lints({"qnn:69": report})] == ["target_silent_fallback"]


OPENVINO_ORACLE = """
import json, sys, collections, numpy as np, openvino as ov
a = json.load(open(sys.argv[1]))
core = ov.Core()
try:
    m = core.read_model(a["model"]); m.reshape({"x": [1, 3, 16, 16]})
    c = core.compile_model(m, "CPU", {"INFERENCE_NUM_THREADS": 1})
except Exception as e:
    json.dump({"error": str(e)}, open(a["out"], "w")); sys.exit(0)
prec = collections.Counter(op.get_rt_info()["runtimePrecision"].astype(str) for op in c.get_runtime_model().get_ordered_ops()
                           if op.get_rt_info()["layerType"].astype(str) not in ("Input", "Output", "Const"))
rng = np.random.default_rng(1)
xs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(a["n"])]
r = c.create_infer_request()
np.save(a["y"], np.concatenate([list(r.infer({"x": x}).values())[0] for x in xs]))
json.dump({"precisions": prec}, open(a["out"], "w"))
"""


@pytest.fixture(scope="module")
def openvino_report(tiny, tmp_path_factory):
    return compiled_target_report(platform_from_name("openvino:cpu"), LevelsInput(tiny, feeds(3), OPTIONS),
                                  tmp_path_factory.mktemp("ov"))


@pytest.mark.parametrize("artifact", ["fp32", "ort_qdq", "ort_qoperator"])
def test_openvino_status_layers_and_accuracy_equal_a_direct_openvino_run(openvino_report, tiny, artifact, tmp_path):
    direct = _oracle("openvino", OPENVINO_ORACLE, tmp_path, model=str(tiny[artifact]), y=str(tmp_path / "y.npy"), n=3)
    art = openvino_report.artifacts[artifact]
    if "error" in direct:  # the per-channel QOperator file: OpenVINO's ONNX frontend cannot convert it
        assert artifact == "ort_qoperator" and art.status == "failed" and "QLinearConv" in art.error
        assert "QDQ" in art.hint and art.numerics is None
        return
    assert art.status == "ok" and art.precision_histogram == direct["precisions"]
    assert art.numerics.worst_sqnr_db == pytest.approx(sqnr(_host_fp32(tiny, 3), np.load(tmp_path / "y.npy")), abs=1e-6)
    assert art.latency is not None and art.latency.runs > 0 and art.latency.intra_op_threads == 1  # native: timed
    assert art.nodes_taken == art.nodes_total == len(onnx.load(str(tiny[artifact])).graph.node)


ORT_ORACLE = """
import json, sys, numpy as np, onnxruntime as ort
a = json.load(open(sys.argv[1]))
so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
so.optimized_model_filepath = a["saved"]; so.intra_op_num_threads = 1
s = ort.InferenceSession(a["model"], so, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(1)
np.save(a["y"], np.concatenate([s.run(None, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)})[0]
                                for _ in range(2)]))
json.dump({"version": ort.__version__, "has_layout": hasattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT")},
          open(a["out"], "w"))
"""


def test_an_ort_release_writes_its_own_graphs_and_lacks_the_layout_level(tiny, tmp_path):
    options = ComparisonOptions(levels=LEVELS, platforms=["ort:1.22.1"], latency_levels=["all"])
    report = platform_levels(platform_from_name("ort:1.22.1"), LevelsInput(tiny, feeds(2), options), host_levels(tiny, LEVELS),
                             tmp_path / "out")
    direct = _oracle("ort-1.22.1", ORT_ORACLE, tmp_path, model=str(tiny["ort_qdq"]), saved=str(tmp_path / "ext.onnx"),
                     y=str(tmp_path / "y.npy"))
    assert report.onnxruntime == direct["version"] == "1.22.1" and not direct["has_layout"]
    saved = Counter(n.op_type for n in onnx.load(str(tmp_path / "ext.onnx")).graph.node)
    assert report.optimized["ort_qdq"]["extended"].op_histogram == dict(saved)
    assert report.optimized["ort_qdq"]["extended"].numerics.worst_sqnr_db == pytest.approx(
        sqnr(_host_fp32(tiny, 2), np.load(tmp_path / "y.npy")), abs=1e-6)
    layout = report.optimized["ort_qdq"]["layout"]
    assert "has no layout level" in layout.error and not layout.op_histogram  # never the extended graph relabelled
    assert report.optimized["ort_qdq"]["all"].latency is not None  # a release runs natively: timed


@pytest.mark.parametrize("name", ["qnn:69", "openvino:cpu", "ort:1.22.1"])
def test_a_target_missing_on_the_server_answers_platform_unavailable(tiny, tmp_path, monkeypatch, name):
    monkeypatch.setenv("QUANTCOMPARE_TARGETS_ROOT", str(tmp_path / "nothing"))
    monkeypatch.delenv("QUANTCOMPARE_ORT_RELEASES", raising=False)
    platform = platform_from_name(name)
    compared = LevelsInput(tiny, feeds(1), OPTIONS)
    report = compiled_target_report(platform, compared, tmp_path) if platform.kind != "ort" else \
        platform_levels(platform, compared, host_levels(tiny, LEVELS), tmp_path)
    assert report.status == "unavailable" and report.error.code == "platform_unavailable"
    assert "make" in report.error.hint
