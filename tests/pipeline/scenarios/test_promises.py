"""Promises the manual (docs/) makes that no other test ran: the ``ort_defaults`` preset, ORT's entropy and
distribution calibrators, and ``latency_ratio`` gates on a real report. Each is checked against
something the program does not control: ORT's own signature, the written file, ORT's timings.
"""

from __future__ import annotations

import inspect

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from service.schemas.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.verdict.gates import gate_from_string, verdict_from_report

ORT_ONLY = {"artifacts": ["ort_qdq"], "levels": ["disable_all"]}


def _file(workdir, name="ort_qdq"):
    model = onnx.load(str(workdir / "artifacts" / f"{name}.onnx"))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return model, inits


def _conv_weight_scale(workdir) -> np.ndarray:
    model, inits = _file(workdir)
    producer = {o: n for n in model.graph.node for o in n.output}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    return np.atleast_1d(inits[producer[conv.input[1]].input[1]])


def _input_scale(workdir) -> float:
    """The scale of the QuantizeLinear that reads the graph input: what calibration decided."""
    model, inits = _file(workdir)
    x = model.graph.input[0].name
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == x)
    return float(inits[q.input[1]])


def test_ort_defaults_preset_is_quantize_statics_own_defaults():
    from onnxruntime.quantization import CalibrationMethod, QuantType, quantize_static

    params = inspect.signature(quantize_static).parameters
    settings = resolved_ort_settings(ComparisonOptions(preset="ort_defaults"))
    qtype = {QuantType.QInt8: "int8", QuantType.QUInt8: "uint8"}
    assert settings["per_channel"] == params["per_channel"].default
    assert settings["reduce_range"] == params["reduce_range"].default
    assert settings["activation_type"] == qtype[params["activation_type"].default]
    assert settings["weight_type"] == qtype[params["weight_type"].default]
    assert settings["calibrate_method"] == {CalibrationMethod.MinMax: "minmax"}[params["calibrate_method"].default]
    assert settings["extra_options"] == {}  # ORT's extra_options=None


def test_ort_defaults_preset_writes_per_tensor_weights_where_matched_writes_per_channel(compared):
    _, defaults = compared("conv_relu", preset="ort_defaults", **ORT_ONLY)
    _, matched = compared("conv_relu", **ORT_ONLY)
    assert _conv_weight_scale(defaults).size == 1  # quantize_static's per_channel=False
    assert _conv_weight_scale(matched).size == 8  # one scale per output channel, as PT2E's XNNPACK config


def test_entropy_calibration_runs_and_with_orts_defaults_keeps_the_full_range(compared):
    """ORT 1.32 calibrate.py: EntropyCalibrater(num_bins=128, num_quantized_bins=128), and
    get_entropy_threshold tries thresholds for i in range(num_quantized_bins // 2, num_bins // 2 + 1):
    with 128 and 128 that is one candidate, the whole histogram, i.e. MinMax's range."""
    report, workdir = compared("conv_relu", ort={"calibrate_method": "entropy"}, **ORT_ONLY)
    art = report.artifacts["ort_qdq"]
    assert art.status == "ok", art.error
    assert art.tool.settings["calibrate_method"] == "entropy" and art.tool.calibration.startswith("Entropy")
    _, minmax = compared("conv_relu", **ORT_ONLY)
    assert _input_scale(workdir) == pytest.approx(_input_scale(minmax), rel=1e-6)
    assert art.optimized["disable_all"].numerics.worst_sqnr_db > 25


def test_distribution_calibration_runs_and_its_symmetric_range_undoes_the_folded_relu(compared):
    """ORT's DistributionCalibrater gives a range centred on 0; quantize_static still removes the Relu
    (it is folded into the QuantizeLinear), so with zero point 0 the negatives pass: the model is wrong.
    What a user who picks 'distribution' for int8 gets; pinned so a change is seen."""
    report, workdir = compared("conv_relu", ort={"calibrate_method": "distribution"}, **ORT_ONLY)
    art = report.artifacts["ort_qdq"]
    assert art.status == "ok", art.error
    assert art.tool.settings["calibrate_method"] == "distribution" and art.tool.calibration.startswith("Distribution")
    model, inits = _file(workdir)
    assert "Relu" not in [n.op_type for n in model.graph.node]
    out_q = [n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] != model.graph.input[0].name]
    assert [int(inits[n.input[2]]) for n in out_q] == [0]  # int8 zero point 0: the range is [-a, a]
    assert art.optimized["disable_all"].numerics.worst_sqnr_db < 5


def test_latency_ratio_gates_on_a_real_report(compared):
    report, _ = compared("conv_relu", artifacts=["ort_qdq"], levels=["disable_all", "all"],
                         latency={"enabled": True, "runs": 5, "warmup": 1}, latency_levels=["disable_all", "all"])
    for level in ("disable_all", "all"):
        fp32 = report.artifacts["fp32"].optimized[level].latency
        qdq = report.artifacts["ort_qdq"].optimized[level].latency
        # at least the runs asked for (the latency protocol adds runs when the timing is not stable)
        assert fp32.runs >= 5 and qdq.runs >= 5 and 0 < qdq.median_ms <= qdq.p90_ms
        ratio = qdq.median_ms / fp32.median_ms
        above, below = ratio * 1.01, ratio * 0.99
        v = verdict_from_report(report, [gate_from_string(f"ort_qdq.{level}.latency_ratio<={above:.9g}"),
                                         gate_from_string(f"ort_qdq.{level}.latency_ratio<={below:.9g}")])
        (passed, failed) = v.gates
        assert passed.passed and not failed.passed and not v.passed
        assert passed.actual == pytest.approx(ratio, rel=1e-9)
    # without latency there is no figure, and the gate says what to turn on
    plain, _ = compared("conv_relu", **ORT_ONLY)
    v = verdict_from_report(plain, [gate_from_string("ort_qdq.disable_all.latency_ratio<=100")])
    assert not v.passed and "latency.enabled" in v.gates[0].message
