"""A detector that ends in NonMaxSuppression lists the boxes it kept, and an int8 file keeps other
boxes than fp32: the two outputs differ in length, so no element-wise figure compares them. Before,
both ORT paths came out "failed: ONNX Runtime could not run this file at any level" (ORT ran them
fine: our comparison raised on the shapes), and when the lengths happened to agree the detections
were compared row by row as if they were the same boxes.

The oracle: ORT sessions this test opens on the samples it uploaded."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import models
from tests.realworld.corpus import build_nms_detector

N_CAL, N_EVAL = 8, 4


def _run(tmp_path, model, gates=()):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    from service.pipeline.verdict.gates import gate_from_string

    x = np.random.default_rng(3).standard_normal((N_CAL + N_EVAL, 1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "samples.npz", x=x)
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all", "all"], "calibration_samples": N_CAL,
        "eval_samples": N_EVAL, "latency": {"enabled": False}, "advice": {"enabled": False}, "gates": [gate_from_string(g) for g in gates]})
    report = run_comparison(ComparisonRequest(model_path=model, model_name=model.name,
                                              calibration_path=tmp_path / "samples.npz", options=options), tmp_path / "job")
    return report, [{"x": x[i]} for i in range(N_CAL, N_CAL + N_EVAL)]


def _session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def test_detections_after_nms_are_compared_by_shape_and_the_scores_element_wise(tmp_path):
    build_nms_detector(tmp_path / "det.onnx")
    report, feeds = _run(tmp_path, tmp_path / "det.onnx")
    fp32, qdq = _session(tmp_path / "det.onnx"), _session(tmp_path / "job" / "artifacts" / "ort_qdq.onnx")
    ref_rows = sum(fp32.run(["detections"], f)[0].shape[0] for f in feeds)
    got_rows = sum(qdq.run(["detections"], f)[0].shape[0] for f in feeds)
    assert ref_rows != got_rows  # the case this test is about: int8 kept another number of boxes

    art = report.artifacts["ort_qdq"]
    assert art.status == "ok", art.error
    for level in ("disable_all", "all"):
        numerics = art.optimized[level].numerics
        det, scores = numerics.outputs
        assert det.compared == "shape" and det.sqnr_db is None and det.cosine is None
        assert "NonMaxSuppression 'nms'" in det.data_dependent
        assert det.reference_shape == [ref_rows, 5]
        if level == "disable_all":
            assert det.shape == [got_rows, 5]
        assert scores.compared == "elementwise" and numerics.elementwise_outputs == 1
        assert numerics.worst_sqnr_db == scores.sqnr_db
    ref = np.concatenate([fp32.run(["scores"], f)[0] for f in feeds]).astype(np.float64)
    act = np.concatenate([qdq.run(["scores"], f)[0] for f in feeds]).astype(np.float64)
    want = 10 * math.log10((ref ** 2).sum() / ((ref - act) ** 2).sum())
    assert art.optimized["disable_all"].numerics.worst_sqnr_db == pytest.approx(want, rel=1e-6)

    lint = next(lt for lt in report.lints if lt.code == "data_dependent_outputs")
    assert lint.artifact == "ort_qdq" and lint.severity == "warning" and "different number of rows" in lint.message
    # The per-tensor table leaves the kept rows out and still measures what the selection read.
    rows = {r.tensor: r for r in report.layers.rows}
    assert "depends on the values" in rows["detections"].left_out["ort_qdq"]
    assert rows["boxes"].artifacts["ort_qdq"].sqnr_db is not None
    inputs = next(lt for lt in report.lints if lt.code == "selection_inputs")  # and the report quotes it
    assert f"'boxes': ort_qdq {rows['boxes'].artifacts['ort_qdq'].sqnr_db:.1f} dB" in inputs.message
    assert "'scores': ort_qdq" in inputs.message
    assert all(a.output != "detections" for a in report.agreement)
    # Advice's re-runs take their SQNR over the same outputs as the levels (its "before" figure).
    from service.pipeline.runtime.numerics import worst_elementwise_sqnr
    from service.pipeline.advice.advice import _data_dependent_positions
    skip = _data_dependent_positions(report.artifacts["fp32"].optimized)
    assert skip == {0}
    ref_all = [np.zeros((ref_rows, 5), np.float32), ref]
    act_all = [np.ones((ref_rows, 5), np.float32), act]  # same shape, other rows: must not count
    assert worst_elementwise_sqnr(ref_all, act_all, skip) == pytest.approx(want, rel=1e-6)


def test_a_gate_on_a_model_whose_every_output_follows_nms_says_why_it_cannot_pass(tmp_path):
    build_nms_detector(tmp_path / "det.onnx", with_scores=False)
    report, _ = _run(tmp_path, tmp_path / "det.onnx", gates=["ort_qdq.disable_all.sqnr_db>=20"])
    numerics = report.artifacts["ort_qdq"].optimized["disable_all"].numerics
    assert numerics.elementwise_outputs == 0 and numerics.worst_sqnr_db is None  # null here is not "exact"
    assert not report.verdict.passed
    assert "no output is judged by sqnr_db" in report.verdict.failures[0]
    assert "compared by shape only" in report.verdict.failures[0]

    from service.render.levels_text import levels_summary_lines  # the CLI's table says "shape", not "exact"
    text = "\n".join(levels_summary_lines(report))
    assert "exact" not in text.split("ort_qdq", 1)[1].splitlines()[0] and "shape" in text

    import time
    from types import SimpleNamespace

    from service.render.page import render_job_page  # and the page: "shape only", never "∞ (exact)"
    job = SimpleNamespace(id="j", created_at=time.time(), status="succeeded", model_name="det.onnx", error=None)
    page = render_job_page(job, report.model_dump(mode="json"), [])
    assert "shape only" in page and "∞ (exact)" not in page


def _graph(nodes, inputs, outputs, inits=()):
    return models.from_nodes(nodes, inputs, outputs, inits, ir=8)


def test_only_tensors_after_a_selection_whose_shape_inference_cannot_fix_count():
    from service.pipeline.inputs.output_shapes import tensors_after_selection
    from service.pipeline.inputs.safety.activations import inferred_at_job_shapes
    from service.pipeline.verdict.lints import padded_selection_lints

    def data_dependent_tensors(model, shapes):
        return tensors_after_selection(model, inferred_at_job_shapes(model, shapes)).moving

    f = TensorProto.FLOAT
    # NonZero's indices scattered back into a fixed-shape tensor: compared element-wise.
    scattered = _graph(
        [helper.make_node("NonZero", ["x"], ["nz"], name="nz"), helper.make_node("Transpose", ["nz"], ["idx"]),
         helper.make_node("GatherND", ["x", "idx"], ["vals"]),
         helper.make_node("ScatterND", ["x", "idx", "vals"], ["fixed"]),
         helper.make_node("Relu", ["x"], ["plain"])],
        [helper.make_tensor_value_info("x", f, [2, 3])],
        [helper.make_tensor_value_info("fixed", f, [2, 3]), helper.make_tensor_value_info("vals", f, ["k"]),
         helper.make_tensor_value_info("plain", f, [2, 3])])
    after = tensors_after_selection(scattered, inferred_at_job_shapes(scattered, {"x": (2, 3)}))
    assert set(after.moving) >= {"nz", "vals"} and "fixed" not in after.moving and "plain" not in after.moving
    assert "fixed" in after.fixed and "plain" not in after.fixed  # after the selection, of a fixed shape
    lint, = padded_selection_lints({"fixed": after.fixed["fixed"]})  # said so: compared row by row
    assert "'fixed' follows NonZero 'nz'" in lint.message and "position by position" in lint.message
    # A selection inside an If body makes the If's outputs move too.
    body = models.branch("NonZero", ["x"], "inner", elem=TensorProto.INT64)
    other = helper.make_graph([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Unsqueeze", ["s", "ax"], ["u"])],
                              "else", [], [helper.make_tensor_value_info("u", TensorProto.INT64, None)])
    branched = _graph(
        [helper.make_node("If", ["c"], ["picked"], then_branch=body, else_branch=other, name="choose")],
        [helper.make_tensor_value_info("x", f, ["n", 3]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("picked", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "ax")])
    assert "If 'choose' (its body holds a NonZero)" in data_dependent_tensors(branched, {"x": (4, 3), "c": ()})["picked"]
    # NonZero of a constant mask has one output shape on every run (and the converter folds it).
    folded = _graph(
        [helper.make_node("NonZero", ["mask"], ["nzc"]), helper.make_node("Squeeze", ["nzc", "ax"], ["where"]),
         helper.make_node("Gather", ["x", "where"], ["picked"], axis=1)],
        [helper.make_tensor_value_info("x", f, [2, 3])], [helper.make_tensor_value_info("picked", f, None)],
        [numpy_helper.from_array(np.array([True, False, True]), "mask"),
         numpy_helper.from_array(np.array([0], np.int64), "ax")])
    assert data_dependent_tensors(folded, {"x": (2, 3)}) == {}
    assert data_dependent_tensors(models.build("relu", shape=[2], ir=8), {"x": (2,)}) == {}


def _detector_opset11(path):
    """The same head at opset 11 (Squeeze/Unsqueeze take axes as an attribute), the kept rows
    unsqueezed after the selection: the tail is converted to the PT2E file's opset."""
    model = onnx.load(str(path))
    graph = model.graph
    squeeze = next(n for n in graph.node if n.op_type == "Squeeze")
    del squeeze.input[1:]
    squeeze.attribute.append(helper.make_attribute("axes", [0]))
    gather = graph.node[-1]
    gather.output[0] = "kept_rows"
    graph.node.append(helper.make_node("Unsqueeze", ["kept_rows"], ["detections"], axes=[0], name="batch_again"))
    graph.output[0].CopyFrom(helper.make_tensor_value_info("detections", TensorProto.FLOAT, [1, "n", 5]))
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 11))
    model.ir_version = 6
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


@pytest.mark.parametrize("opset", [17, 11])
def test_pt2e_quantizes_the_graph_before_nms_and_keeps_the_upload_tail_in_float(tmp_path, opset):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    build_nms_detector(tmp_path / "det.onnx")
    if opset == 11:
        _detector_opset11(tmp_path / "det.onnx")
    x = np.random.default_rng(3).standard_normal((N_CAL + N_EVAL, 1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "samples.npz", x=x)
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq"], "levels": ["disable_all"], "calibration_samples": N_CAL, "eval_samples": N_EVAL,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "det.onnx", model_name="det.onnx",
                                              calibration_path=tmp_path / "samples.npz", options=options), tmp_path / "job")
    art = report.artifacts["pt2e_qdq"]
    assert art.status == "ok", art.error  # before: skipped, "no ONNX -> torch converter for NonMaxSuppression"
    assert any("NonMaxSuppression 'nms'" in n and "in float" in n for n in art.tool.notes)
    pt2e_path = tmp_path / "job" / "artifacts" / "pt2e_qdq.onnx"
    written = onnx.load(str(pt2e_path))
    ops = [n.op_type for n in written.graph.node]
    assert "NonMaxSuppression" in ops and "QuantizeLinear" in ops and ops.index("NonMaxSuppression") > ops.index("Conv")
    assert [o.name for o in written.graph.output] == ["detections", "scores"] and [i.name for i in written.graph.input] == ["x"]
    assert not list((tmp_path).glob(".*pt2e_prefix*"))  # the prefix file is gone

    feeds = [{"x": x[i]} for i in range(N_CAL, N_CAL + N_EVAL)]
    fp32, pt2e = _session(tmp_path / "det.onnx"), _session(pt2e_path)
    for f in feeds:  # the selection runs on PT2E's int8 boxes and scores: rows of the same width, near fp32's count
        ref, got = fp32.run(["detections"], f)[0], pt2e.run(["detections"], f)[0]
        assert got.shape[-1] == ref.shape[-1] == 5 and got.ndim == ref.ndim
        assert abs(got.shape[-2] - ref.shape[-2]) <= max(3, ref.shape[-2] // 4)
    tail = {r.op_type: r for r in art.optimized["disable_all"].unfused if r.blocker == "float_tail"}
    assert set(tail) >= {"NonMaxSuppression", "Gather"}  # why float: kept so on purpose, not "quantize this op"
    assert "NonMaxSuppression 'nms'" in tail["NonMaxSuppression"].detail
    det = art.optimized["disable_all"].numerics.outputs[0]
    rows = sum(pt2e.run(["detections"], f)[0].shape[-2] for f in feeds)  # [rows, 5] or [1, rows, 5] per sample
    assert det.compared == "shape" and det.shape == ([rows, 5] if opset == 17 else [1, rows, 5])


def test_a_graph_that_is_only_its_selection_is_skipped_by_pt2e_with_the_converters_reason(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    inits = [numpy_helper.from_array(np.array([10], np.int64), "m"), numpy_helper.from_array(np.array([0.5], np.float32), "iou")]
    graph = helper.make_graph([helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou"], ["sel"], name="nms")],
                              "only", [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 64, 4]),
                                       helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 64])],
                              [helper.make_tensor_value_info("sel", TensorProto.INT64, ["n", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, tmp_path / "nms.onnx")
    options = ComparisonOptions.model_validate({"artifacts": ["pt2e_qdq"], "levels": ["disable_all"], "calibration_samples": 2,
                                                "eval_samples": 1, "latency": {"enabled": False}, "advice": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "nms.onnx", model_name="nms.onnx", options=options),
                            tmp_path / "job")
    pt2e = report.artifacts["pt2e_qdq"]  # before: failed with ORT's refusal of an empty prefix file
    assert pt2e.status == "skipped" and "NonMaxSuppression" in pt2e.error.message


def test_an_nms_threshold_given_as_an_input_is_held_at_a_usual_value_and_the_tail_reads_it(tmp_path):
    """normal(0, 1) for an iou_threshold input made ORT refuse every run of fp32 ("iou_threshold must
    be in range [0, 1]", non_max_suppression_helper.h)."""
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    build_nms_detector(tmp_path / "det.onnx")
    model = onnx.load(str(tmp_path / "det.onnx"))
    nms = next(n for n in model.graph.node if n.op_type == "NonMaxSuppression")
    nms.input[3] = "iou_in"
    model.graph.input.append(helper.make_tensor_value_info("iou_in", TensorProto.FLOAT, [1]))
    onnx.save(model, tmp_path / "det.onnx")
    options = ComparisonOptions.model_validate({"artifacts": ["pt2e_qdq"], "levels": ["disable_all"], "calibration_samples": 4,
                                                "eval_samples": 2, "latency": {"enabled": False}, "advice": {"enabled": False},
                                                "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "det.onnx", model_name="det.onnx", options=options),
                            tmp_path / "job")
    assert report.samples.generators["iou_in"].startswith("constant 0.5: the model reads it as the iou_threshold")
    assert report.artifacts["fp32"].status == "ok" and report.artifacts["pt2e_qdq"].status == "ok"
    written = onnx.load(str(tmp_path / "job" / "artifacts" / "pt2e_qdq.onnx"))
    assert [i.name for i in written.graph.input] == ["x", "iou_in"]  # only the tail reads it


def test_no_cut_when_the_selection_comes_before_most_of_the_network():
    """A NonZero early on, then two MatMuls: that is not a post-processing tail to keep in float."""
    from service.pipeline.quantize.selection_tail import selection_split

    f = TensorProto.FLOAT
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("NonZero", ["h"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["nzf"], to=f), helper.make_node("MatMul", ["nzf", "w2"], ["a"]),
             helper.make_node("MatMul", ["a", "w3"], ["y"])]
    inits = [w, numpy_helper.from_array(np.ones((4, 4), np.float32), "w3"),
             numpy_helper.from_array(np.ones((4, 4), np.float32), "w2")]
    early = _graph(nodes, [helper.make_tensor_value_info("x", f, [2, 4])], [helper.make_tensor_value_info("y", f, None)], inits)
    assert selection_split(early, {"x": (2, 4)}) is None
    late = _graph(nodes[:3], [helper.make_tensor_value_info("x", f, [2, 4])],
                  [helper.make_tensor_value_info("nzf", f, None)], [w])
    split = selection_split(late, {"x": (2, 4)})
    assert split is not None and [n.op_type for n in split.tail_nodes] == ["NonZero", "Cast"] and split.cut == ["h"]
