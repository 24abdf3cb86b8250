"""Outputs SQNR cannot judge, and paths that measure nothing (issue 42).

An angle output wraps around (SQNR 4-5 dB on a model that is fine); a classifier saturated on generated inputs
reads 100 dB; outputs drawn from unseeded random ops, or compared by shape only, have no figure at all, and the
path read "ok" without a word. Each output now says what judges it (and how), the artifact says whether its
accuracy is measured, and a gate on a figure no output has fails saying which figure fits."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.runtime.output_kinds import angular_errors, argmax_agreement, output_kind
from service.pipeline.verdict.gates import gate_from_string
from service.schemas.options import ComparisonOptions
from tests import models

F = TensorProto.FLOAT


def _page(report) -> str:
    import time
    from types import SimpleNamespace

    from service.render.page import render_job_page

    job = SimpleNamespace(id="j", created_at=time.time(), status="succeeded", model_name="m.onnx", error=None)
    return render_job_page(job, report.model_dump(mode="json"), [])


def _options(*gates: str, **extra) -> ComparisonOptions:
    return ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 8, "eval_samples": 4,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False},
        "gates": [gate_from_string(g).model_dump() for g in gates], **extra})


# ---- the kinds, on arrays ------------------------------------------------------------------------

def test_kinds_are_found_from_fp32_values_alone():
    rng = np.random.default_rng(0)
    angles = rng.uniform(-math.pi, math.pi, (4, 64)).astype(np.float32)
    assert output_kind(angles, 4)[0] == "circular"
    assert output_kind(angles + math.pi, 4)[0] == "circular"  # [0, 2 pi] too
    assert output_kind(np.tanh(rng.standard_normal((4, 64))).astype(np.float32), 4)[0] is None  # never spans
    assert output_kind(rng.uniform(-3, 3, (4, 64)).astype(np.float32) * 2, 4)[0] is None  # past pi
    same = np.tile(rng.standard_normal((1, 10)), (4, 1)).astype(np.float32)
    assert output_kind(same, 4)[0] == "near_constant" and output_kind(same, 1)[0] is None  # one sample: no spread
    logits = rng.standard_normal((4, 10)) * 100
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    assert output_kind(probs.astype(np.float32), 4)[0] == "saturated"
    soft = np.exp(logits / 100) / np.exp(logits / 100).sum(1, keepdims=True)
    assert output_kind(soft.astype(np.float32), 4)[0] is None  # a classifier that is not saturated: SQNR judges it


def test_the_angular_error_wraps_and_argmax_agreement_counts_rows():
    ref = np.array([math.pi - 0.01, -1.0], np.float32)
    worst, mean = angular_errors(ref, np.array([-math.pi + 0.01, -1.0], np.float32))
    assert worst == pytest.approx(0.02, abs=1e-5) and mean == pytest.approx(0.01, abs=1e-5)
    p = np.array([[0.9, 0.1], [0.2, 0.8]], np.float32)
    assert argmax_agreement(p, np.array([[0.6, 0.4], [0.7, 0.3]], np.float32)) == 0.5
    assert argmax_agreement(np.array([[3.0, 1.0]], np.float32), np.array([[3.0, 1.0]], np.float32)) is None


# ---- through a job ---------------------------------------------------------------------------------

def _atan2(path):
    """phase = atan2(x @ Wb, x @ Wa), written with Atan, Div and Where as exporters write torch.atan2/angle:
    fp32's values fill [-pi, pi], and a quantized one just past the cut lands on the other side."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "Wa"], ["a"], name="re"),
             helper.make_node("MatMul", ["x", "Wb"], ["b"], name="im"),
             helper.make_node("Div", ["b", "a"], ["q"]), helper.make_node("Atan", ["q"], ["r"]),
             helper.make_node("Add", ["r", "pi"], ["rp"]), helper.make_node("Sub", ["r", "pi"], ["rm"]),
             helper.make_node("Less", ["a", "zero"], ["aneg"]), helper.make_node("GreaterOrEqual", ["b", "zero"], ["bpos"]),
             helper.make_node("Where", ["bpos", "rp", "rm"], ["turned"]),
             helper.make_node("Where", ["aneg", "turned", "r"], ["phase"])]
    onnx.save(models.from_nodes(
        nodes, [("x", [1, 16])], [("phase", [1, 64])],
        {"Wa": rng.standard_normal((16, 64)).astype(np.float32) * 0.3,
         "Wb": rng.standard_normal((16, 64)).astype(np.float32) * 0.3,
         "pi": np.array(np.pi, np.float32), "zero": np.array(0, np.float32)}, ir=8), path)
    return path


def test_an_angle_output_is_judged_by_its_angular_error_not_by_sqnr(tmp_path):
    from service.render.text import summary_table

    report = run_comparison(ComparisonRequest(model_path=_atan2(tmp_path / "phase.onnx"), options=_options(
        "ort_qdq.disable_all.sqnr_db>=20", "ort_qdq.disable_all.angular_error<=0.05")), tmp_path / "job")
    art = report.artifacts["ort_qdq"]
    numerics = art.optimized["disable_all"].numerics
    (phase,) = numerics.outputs
    assert phase.kind == "circular" and phase.judged_by == "angular_error"
    assert phase.sqnr_db < 20 and phase.angular_error_mean < 0.05  # SQNR counts the wraps as errors of 2 pi
    assert numerics.worst_sqnr_db is None and numerics.elementwise_outputs == 0
    assert numerics.worst_angular_error == phase.angular_error_mean and art.accuracy == "measured"
    sqnr_gate, angle_gate = report.verdict.gates
    assert not sqnr_gate.passed and "'phase' is circular" in sqnr_gate.message and "angular_error" in sqnr_gate.message
    assert angle_gate.passed, angle_gate.message
    assert any(x.code == "circular_outputs" for x in report.lints)
    text = summary_table(report)
    assert "output 'phase' circular: angular error" in text and "angle " in text
    assert "the difference wrapped into [-pi, pi)" in _page(report)


def test_outputs_drawn_from_unseeded_random_ops_are_not_measured_and_no_gate_passes_on_them(tmp_path):
    models.save("sampler", tmp_path / "vae.onnx")
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "vae.onnx", options=_options(
        "ort_qdq.disable_all.sqnr_db>=0")), tmp_path / "job")
    art = report.artifacts["ort_qdq"]
    assert art.status == "ok" and art.accuracy == "not measured"
    numerics = art.optimized["disable_all"].numerics
    assert numerics.accuracy == "not measured" and numerics.not_measured_outputs == 2
    assert all(o.judged_by is None and "RandomNormalLike" in o.not_measured for o in numerics.outputs)
    (gate,) = report.verdict.gates
    assert not gate.passed and "not measured" in gate.message  # before: a figure over two draws passed it
    assert any(x.code == "unmeasured_outputs" for x in report.lints)
    assert "accuracy not measured" in _page(report)


def _classifier(path):
    """Two heads on x @ W: 'fixed' carries a bias of 60 on class 0 (the same answer on every input, as a
    classifier saturated on generated samples), 'sharp' multiplies its logits by 100 (one-hot rows whose class
    moves with the input)."""
    rng = np.random.default_rng(0)
    bias = np.zeros(10, np.float32)
    bias[0] = 60
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "bias"], ["hb"]),
             helper.make_node("Softmax", ["hb"], ["fixed"], axis=-1), helper.make_node("Mul", ["h", "k"], ["hk"]),
             helper.make_node("Softmax", ["hk"], ["sharp"], axis=-1)]
    onnx.save(models.from_nodes(
        nodes, [("x", [1, 16])], [("fixed", [1, 10]), ("sharp", [1, 10])],
        {"W": rng.standard_normal((16, 10)).astype(np.float32), "bias": bias, "k": np.array(100, np.float32)},
        ir=8), path)
    return path


def test_a_constant_classifier_output_is_not_measured_and_a_saturated_one_is_judged_by_argmax(tmp_path):
    report = run_comparison(ComparisonRequest(model_path=_classifier(tmp_path / "cls.onnx"), options=_options(
        "ort_qdq.disable_all.argmax_agreement>=0.5", eval_samples=8)), tmp_path / "job")
    art = report.artifacts["ort_qdq"]
    fixed, sharp = art.optimized["disable_all"].numerics.outputs
    assert fixed.kind == "near_constant" and fixed.judged_by is None and "same on all 8 eval samples" in fixed.not_measured
    assert sharp.kind == "saturated" and sharp.judged_by == "argmax_agreement" and sharp.argmax_agreement >= 0.5
    assert art.accuracy == "partly measured" and "'fixed'" in art.accuracy_note
    assert report.verdict.passed, report.verdict.failures
    codes = {x.code for x in report.lints}
    assert {"unmeasured_outputs", "saturated_outputs"} <= codes
