"""A classifier that also outputs its ArgMax label and TopK indices: those outputs are right or wrong,
and the distance between two class indices is no error signal. Before, they were compared by SQNR
and became the headline: the logits kept ~33 dB while the job reported ~12 dB from the labels, and
a label output alone read as an "exact" match to the client whatever its labels were. A string
output crashed every level ("could not convert string to float").

The oracle: ORT sessions this test opens on the samples it uploaded."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

D, C, N_CAL, N_EVAL = 32, 50, 16, 32


def _classifier(path, *, float_output: bool):
    """MatMul logits -> ArgMax label and TopK indices; without ``float_output`` only the label and its
    class name (a string, as scikit-learn classifiers with string classes output) come out."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((D, C)) * 0.05).astype(np.float32)
    # Classes in near-tied pairs: int8's error flips some labels on any seed, and leaves the logits' SQNR high.
    w[:, 1::2] = w[:, 0::2] + 0.002 * rng.standard_normal((D, C // 2)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"], name="fc"),
             helper.make_node("ArgMax", ["logits"], ["cls"], axis=1, keepdims=0, name="argmax")]
    outputs = [helper.make_tensor_value_info("cls", TensorProto.INT64, [1])]
    if float_output:
        nodes.append(helper.make_node("TopK", ["logits", "k"], ["top_v", "top_i"], axis=1, name="topk"))
        outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, C]), *outputs,
                   helper.make_tensor_value_info("top_i", TensorProto.INT64, [1, 5])]
    else:
        nodes.append(helper.make_node("LabelEncoder", ["cls"], ["cls_text"], domain="ai.onnx.ml", name="names",
                                      keys_int64s=list(range(C)), values_strings=[f"class_{i}" for i in range(C)]))
        outputs.append(helper.make_tensor_value_info("cls_text", TensorProto.STRING, [1]))
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
                              outputs, [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([5], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)])
    model.ir_version = 8
    onnx.save(model, path)


def _run(tmp_path, *, float_output: bool, gates):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    from service.pipeline.verdict.gates import gate_from_string

    _classifier(tmp_path / "clf.onnx", float_output=float_output)
    x = np.random.default_rng(4).standard_normal((N_CAL + N_EVAL, 1, D)).astype(np.float32)
    np.savez(tmp_path / "samples.npz", x=x)
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all", "all"], "calibration_samples": N_CAL,
        "eval_samples": N_EVAL, "latency": {"enabled": False}, "advice": {"enabled": False},
        "gates": [gate_from_string(g) for g in gates]})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "clf.onnx", model_name="clf.onnx",
                                              calibration_path=tmp_path / "samples.npz", options=options), tmp_path / "job")
    feeds = [{"x": x[i]} for i in range(N_CAL, N_CAL + N_EVAL)]
    return report, _outputs(tmp_path / "clf.onnx", feeds), _outputs(tmp_path / "job" / "artifacts" / "ort_qdq.onnx", feeds)


def _outputs(path, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    runs = [s.run(None, f) for f in feeds]
    return [np.concatenate([r[k] for r in runs]) for k in range(len(runs[0]))]


def test_labels_are_compared_exactly_and_the_sqnr_reads_the_logits(tmp_path):
    report, ref, got = _run(tmp_path, float_output=True,
                            gates=["ort_qdq.all.sqnr_db>=25", "ort_qdq.all.mismatch_share<=0.01"])
    label_share = float(np.mean(ref[1] != got[1]))
    top_share = float(np.mean(ref[2] != got[2]))
    assert 0 < label_share < 0.5 and top_share > 0  # the case this test is about: int8 flipped some labels
    logits_sqnr = 10 * math.log10((ref[0].astype(np.float64) ** 2).sum()
                                  / ((ref[0].astype(np.float64) - got[0]) ** 2).sum())
    assert logits_sqnr > 25

    art = report.artifacts["ort_qdq"]
    assert art.status == "ok", art.error
    numerics = art.optimized["disable_all"].numerics
    logits, cls, top_i = numerics.outputs
    assert logits.compared == "elementwise" and logits.sqnr_db == pytest.approx(logits_sqnr, rel=1e-6)
    for o, share in ((cls, label_share), (top_i, top_share)):
        assert o.compared == "exact" and o.sqnr_db is None and o.cosine is None
        assert o.mismatch_share == pytest.approx(share)
    assert numerics.worst_sqnr_db == pytest.approx(logits_sqnr, rel=1e-6)  # not the labels' distance
    assert numerics.worst_max_abs_error == logits.max_abs_error
    assert numerics.worst_mismatch_share == pytest.approx(max(label_share, top_share))
    assert (numerics.elementwise_outputs, numerics.exact_outputs) == (1, 2)

    sqnr_gate, label_gate = report.verdict.gates
    assert sqnr_gate.passed and sqnr_gate.actual == pytest.approx(art.optimized["all"].numerics.worst_sqnr_db)
    assert not label_gate.passed and label_gate.actual == pytest.approx(art.optimized["all"].numerics.worst_mismatch_share)
    lints = {lt.message.split("'")[1]: lt for lt in report.lints if lt.code == "integer_outputs_differ"}
    assert set(lints) == {"cls", "top_i"} and f"{100 * label_share:.1f}%" in lints["cls"].message

    from service.render.levels_text import levels_summary_lines
    text = "\n".join(levels_summary_lines(report))
    shares = "/".join(f"{100 * art.optimized[lv].numerics.worst_mismatch_share:.1f}%" for lv in ("disable_all", "all"))
    assert f"labels (integer outputs) differing from fp32 per level: ort_qdq {shares}" in text


def test_a_model_with_only_labels_gates_on_mismatch_share(tmp_path):
    report, ref, got = _run(tmp_path, float_output=False,
                            gates=["ort_qdq.all.sqnr_db>=25", "ort_qdq.all.mismatch_share<=0.5"])
    share = float(np.mean(ref[0] != got[0]))
    assert share > 0

    art = report.artifacts["ort_qdq"]
    for level in ("disable_all", "all"):
        ol = art.optimized[level]
        assert ol.error is None  # the string output is compared, not a crash
        cls, text = ol.numerics.outputs
        assert cls.mismatch_share == pytest.approx(share) and text.mismatch_share == pytest.approx(share)
        assert text.max_abs_error is None and ol.numerics.worst_sqnr_db is None
    sqnr_gate, label_gate = report.verdict.gates
    assert not sqnr_gate.passed and "gate on mismatch_share" in sqnr_gate.message
    assert label_gate.passed and label_gate.actual == pytest.approx(share)

    # The client must not read the null SQNR of a label-only level as an exact match.
    from quantcompare_client import Report

    client = Report(report.model_dump(mode="json"))
    numerics = client.artifacts["ort_qdq"].optimized["all"].numerics
    assert numerics.worst_sqnr_db is None and numerics.worst_mismatch_share == pytest.approx(share)
    assert [o.compared for o in numerics.outputs] == ["exact", "exact"] and numerics.outputs[0].sqnr_db is None

    import time
    from types import SimpleNamespace

    from service.render.page import render_job_page  # the page: "exact only" and the share, never "∞ (exact)"
    job = SimpleNamespace(id="j", created_at=time.time(), status="succeeded", model_name="clf.onnx", error=None)
    page = render_job_page(job, report.model_dump(mode="json"), [])
    assert "exact only" in page and f"labels differ: {100 * share:.1f}%" in page and "∞ (exact)" not in page
