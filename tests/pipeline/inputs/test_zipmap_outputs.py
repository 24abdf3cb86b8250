"""A scikit-learn style classifier (an MLP exported with ZipMap: its probabilities come out as a list
of {class: probability} dicts, a sequence of maps) is compared like any model: before, the job
crashed with "float() argument must be ... not 'dict'" and no report.

The oracle: ORT sessions this test opens on the samples it uploaded, the dicts turned into rows here."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

N_CAL, N_EVAL = 8, 4


def _mlp_with_zipmap(path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.standard_normal((16, 3)).astype(np.float32) * 0.5, "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["logits"], name="fc2"),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
             helper.make_node("ArgMax", ["probs"], ["label"], axis=1, keepdims=0),
             helper.make_node("ZipMap", ["probs"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2])]
    zipmap = helper.make_value_info("probabilities", helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [1]), zipmap], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    onnx.save(model, path)


def _rows(session, feeds):
    return np.array([[p[c] for c in (0, 1, 2)] for f in feeds for p in session.run(["probabilities"], f)[0]])


def test_a_zipmap_classifier_is_compared_on_its_probabilities(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    _mlp_with_zipmap(tmp_path / "mlp.onnx")
    x = np.random.default_rng(3).standard_normal((N_CAL + N_EVAL, 1, 4)).astype(np.float32)
    np.savez(tmp_path / "samples.npz", x=x)
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": N_CAL, "eval_samples": N_EVAL,
        "latency": {"enabled": False}, "advice": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "mlp.onnx", model_name="mlp.onnx",
                                              calibration_path=tmp_path / "samples.npz", options=options), tmp_path / "job")
    assert report.artifacts["ort_qdq"].status == "ok"
    pt2e = report.artifacts["pt2e_qdq"]  # ZipMap has no torch form: said so, not "upload a .pt2"
    assert pt2e.status == "skipped" and "ai.onnx.ml.ZipMap" in pt2e.error.message
    assert "no torch form" in pt2e.error.hint and ".pt2" not in pt2e.error.hint
    assert [o.dtype for o in report.model.outputs] == ["int64", "seq(map(int64,tensor(float32)))"]
    got = {o.name: o for o in report.artifacts["ort_qdq"].optimized["disable_all"].numerics.outputs}

    feeds = [{"x": x[i]} for i in range(N_CAL, N_CAL + N_EVAL)]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = _rows(ort.InferenceSession(str(tmp_path / "mlp.onnx"), so, providers=["CPUExecutionProvider"]), feeds)
    quantized = tmp_path / "job" / "artifacts" / "ort_qdq.onnx"
    act = _rows(ort.InferenceSession(str(quantized), so, providers=["CPUExecutionProvider"]), feeds)
    noise = ((ref - act).astype(np.float64) ** 2).sum()
    want = 10 * math.log10((ref.astype(np.float64) ** 2).sum() / noise)
    assert got["probabilities"].sqnr_db == pytest.approx(want, rel=1e-6)
    assert report.layers is not None and any(r.tensor == "probs" for r in report.layers.rows)

