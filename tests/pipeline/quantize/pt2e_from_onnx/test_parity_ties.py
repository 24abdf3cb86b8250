"""A detector's end-to-end head ranks anchors with TopK, and most anchors' scores are far below zero.
ORT's Sigmoid gives exactly 0.0 below -18 while torch's gives 1e-8 .. 1e-26, so among ORT's tied
zeros ONNX keeps the lower index first and torch ranks by the tiny values: the two pick other
anchors, and every tensor after the TopK differs. The PT2E path of such uploads (an ultralytics
end-to-end export: TopK of 300 of 336 anchors, 217 at 0.0) was skipped as "the converted torch
module does not match ORT". The converter was right; the ranking broke a tie.

The oracle: ORT and torch on the same values; the one condition: how far below zero the scores go."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from pt2e_upload import pt2e_of_upload

D, ANCHORS, K = 16, 64, 48


def _ranking_head(path, *, logit_offset: float):
    """x -> MatMul -> + offset -> Sigmoid scores; TopK(scores, K) -> GatherElements(boxes, indices)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((D, ANCHORS)) * 0.5).astype(np.float32), "w_score"),
             numpy_helper.from_array(np.full(ANCHORS, logit_offset, np.float32), "offset"),
             numpy_helper.from_array(rng.standard_normal((D, ANCHORS)).astype(np.float32), "w_box"),
             numpy_helper.from_array(np.array([K], np.int64), "k")]
    nodes = [helper.make_node("MatMul", ["x", "w_score"], ["logits"], name="score_fc"),
             helper.make_node("Add", ["logits", "offset"], ["shifted"], name="shift"),
             helper.make_node("Sigmoid", ["shifted"], ["scores"], name="sigmoid"),
             helper.make_node("MatMul", ["x", "w_box"], ["boxes"], name="box_fc"),
             helper.make_node("TopK", ["scores", "k"], ["top_scores", "top_idx"], axis=1, name="rank"),
             helper.make_node("GatherElements", ["boxes", "top_idx"], ["picked"], axis=1, name="pick")]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
                              [helper.make_tensor_value_info("picked", TensorProto.FLOAT, [1, K]),
                               helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, [1, K])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _scores(path, feed):
    model = onnx.load(str(path))
    model.graph.output.append(helper.make_empty_tensor_value_info("shifted"))
    model.graph.output.append(helper.make_empty_tensor_value_info("scores"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    *_, shifted, scores = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)
    return shifted, scores


def test_a_topk_that_broke_a_tie_is_not_a_conversion_fault(tmp_path):
    upload = _ranking_head(tmp_path / "head.onnx", logit_offset=-40.0)
    tool, samples = pt2e_of_upload(upload, tmp_path / "pt2e.onnx")
    shifted, scores = _scores(upload, samples.evaluation[0])
    # the condition: ORT ties at exactly 0.0 across the K-th place, where torch keeps distinct values
    assert (scores == 0).sum() > ANCHORS - K and np.unique(torch.sigmoid(torch.from_numpy(shifted)).numpy()).size == ANCHORS

    parity = tool.conversion["parity"]
    assert parity["ok"]
    assert set(parity["not_compared_after_ties"]) == {"picked"}  # the scores TopK kept agree: compared
    assert set(parity["per_output_max_abs"]) == {"top_scores"}
    assert "TopK node 'rank' picked other positions among values equal within the tolerance" in \
        parity["not_compared_after_ties"]["picked"]
    assert any(n.startswith("parity left out output 'picked'") for n in tool.notes)  # shown on the page
    assert ort.InferenceSession(str(tmp_path / "pt2e.onnx"), providers=["CPUExecutionProvider"]).run(
        None, samples.evaluation[0])[0].shape == (1, K)


def test_without_a_tie_the_outputs_after_the_ranking_are_compared(tmp_path):
    upload = _ranking_head(tmp_path / "head.onnx", logit_offset=0.0)
    tool, samples = pt2e_of_upload(upload, tmp_path / "pt2e.onnx")
    assert (_scores(upload, samples.evaluation[0])[1] == 0).sum() == 0
    parity = tool.conversion["parity"]
    assert parity["ok"] and "not_compared_after_ties" not in parity
    assert set(parity["per_output_max_abs"]) == {"picked", "top_scores"}
    assert not any(n.startswith("parity left out") for n in tool.notes)


def test_a_ranking_that_picked_other_values_is_still_a_fault(tmp_path):
    """Indices that differ where the values they pick differ too are no tie: parity names the TopK."""
    from onnx_torch.module import build_module, record_values
    from service.pipeline.quantize.pt2e_from_onnx.parity import first_diverging

    upload = _ranking_head(tmp_path / "head.onnx", logit_offset=-40.0)
    model = onnx.load(str(upload))
    feed = {"x": np.random.default_rng(1).standard_normal((1, D)).astype(np.float32)}
    record = record_values(build_module(model, ["x"], feed).module.eval(), feed)
    first, ties = first_diverging(model, record, feed)
    assert first is None and set(ties) == {"top_idx"}  # the tie, as in the test above
    record["top_scores"] = record["top_scores"] + 1.0  # values the converter got wrong
    first, ties = first_diverging(model, record, feed)
    assert first is not None and first.startswith("'top_scores' (output of TopK node 'rank'") and not ties


def test_the_job_quantizes_such_a_head_and_says_which_rows_it_compares(tmp_path):
    """End to end: the PT2E path is ok, and the report says the outputs after the TopK hold the rows
    each file kept (compared position by position) and quotes the per-tensor SQNR of what it ranked."""
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    upload = _ranking_head(tmp_path / "head.onnx", logit_offset=-40.0)
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all", "all"], "calibration_samples": 4,
        "eval_samples": 2, "latency": {"enabled": False}, "advice": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=upload, model_name="head.onnx", options=options), tmp_path / "job")
    assert report.artifacts["pt2e_qdq"].status == "ok", report.artifacts["pt2e_qdq"].error
    lints = {lt.code: lt for lt in report.lints}
    assert "'picked' follows TopK 'rank'" in lints["padded_selection_outputs"].message
    assert "'top_scores' follows TopK 'rank'" in lints["padded_selection_outputs"].message
    quoted = lints["selection_inputs"].message
    rows = {r.tensor: r for r in report.layers.rows}
    sqnr = rows["scores"].artifacts["ort_qdq"].sqnr_db
    assert f"'scores': ort_qdq {'exact' if sqnr is None else f'{sqnr:.1f} dB'}" in quoted
    assert "compare the rows each file kept, position by position" in quoted
    # still compared element-wise, as before: the shape is k rows whatever the values
    assert all(o.compared == "elementwise" for o in report.artifacts["ort_qdq"].optimized["all"].numerics.outputs)
