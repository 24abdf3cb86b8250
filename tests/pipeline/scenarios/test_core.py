"""The core: one model in, three quantized artifacts, and what each file writes.

The chapter's conv_relu walk-through is the first test: PT2E leaves a float Conv between DQ and Q
with fp32 bias; ORT's quantize_static (QDQ) writes int32 bias and no Relu; QOperator writes QLinearConv.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from service.pipeline.inspect.inventory import inventory_from_onnx
from service.pipeline.vocabulary import op_key


def _nodes(path):
    return [op_key(n) for n in onnx.load(str(path)).graph.node]


def test_conv_relu_pt2e_keeps_float_conv_between_dq_and_q_with_fp32_bias(compared):
    report, workdir = compared("conv_relu")
    art = report.artifacts["pt2e_qdq"]
    assert art.status == "ok"
    ops = _nodes(workdir / "artifacts" / "pt2e_qdq.onnx")
    assert ops.count("Conv") == 1 and "Relu" in ops and "QLinearConv" not in ops
    model = onnx.load(str(workdir / "artifacts" / "pt2e_qdq.onnx"))
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    producers = {o: n for n in model.graph.node for o in n.output}
    assert producers[conv.input[0]].op_type == "DequantizeLinear"
    assert producers[conv.input[1]].op_type == "DequantizeLinear"
    bias_init = {i.name: i for i in model.graph.initializer}[conv.input[2]]
    assert bias_init.data_type == onnx.TensorProto.FLOAT
    assert art.quantization.bias_summary == "float32"
    assert art.quantization.ops_quantized == {"Conv": 1, "Relu": 1}
    assert art.quantization.folded_activations == []


def test_conv_relu_ort_qdq_writes_int32_bias_and_drops_relu(compared):
    report, workdir = compared("conv_relu")
    art = report.artifacts["ort_qdq"]
    assert art.status == "ok"
    ops = _nodes(workdir / "artifacts" / "ort_qdq.onnx")
    assert "Relu" not in ops and ops.count("Conv") == 1
    assert art.quantization.bias_summary == "int32"
    (bias,) = art.quantization.bias
    assert bias.quantized_in_file and bias.dtype == "int32" and bias.scale_matches_input_times_weight is True
    (folded,) = art.quantization.folded_activations
    assert folded.op_type == "Relu" and folded.count == 1


def test_conv_relu_ort_qoperator_writes_qlinearconv(compared):
    report, workdir = compared("conv_relu")
    art = report.artifacts["ort_qoperator"]
    assert art.status == "ok"
    assert _nodes(workdir / "artifacts" / "ort_qoperator.onnx") == ["QuantizeLinear", "QLinearConv", "DequantizeLinear"]
    assert art.quantization.format == "qoperator"
    assert art.quantization.int8_kernels_in_file == {"QLinearConv": 1}


@pytest.mark.parametrize("artifact", ["pt2e_qdq", "ort_qdq", "ort_qoperator"])
def test_op_zoo_inventory_matches_the_file(compared, artifact):
    """Every reported scale / zero point / dtype / axis equals what onnx.numpy_helper reads."""
    report, workdir = compared("op_zoo_net")
    art = report.artifacts[artifact]
    assert art.status == "ok", art.error
    model = onnx.load(str(workdir / "artifacts" / f"{artifact}.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            inits[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    by_name = {t.name: t for t in art.quantization.tensors}
    checked = 0
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale, zp = inits[node.input[1]], inits[node.input[2]]
        key = node.input[0] if node.op_type == "QuantizeLinear" else node.output[0]
        if node.op_type == "DequantizeLinear" and node.input[0] not in inits:
            key = node.input[0]
            producer = next((n for n in model.graph.node if node.input[0] in n.output), None)
            if producer is not None and producer.op_type == "QuantizeLinear":
                key = producer.input[0]
        t = by_name[key]
        assert np.allclose(t.scale, np.ravel(scale)), key
        assert t.zero_point == [int(z) for z in np.ravel(zp)], key
        assert t.dtype == zp.dtype.name
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        assert t.per_channel == (np.size(scale) > 1)
        assert t.axis == (axis if np.size(scale) > 1 else None)
        checked += 1
    assert checked == art.quantization.quantize_linear + art.quantization.dequantize_linear
    weights = [t for t in art.quantization.tensors if t.role == "weight"]
    assert weights and all(t.dtype == "int8" and t.symmetric for t in weights)
    assert all(t.per_channel for t in weights if len(t.scale) > 1)
    assert all(t.storage == "quantized_initializer" for t in weights)


def test_op_zoo_all_three_paths_ok_and_report_records_the_shared_samples(compared):
    report, _ = compared("op_zoo_net")
    assert {n: a.status for n, a in report.artifacts.items()} == {
        "fp32": "ok", "pt2e_qdq": "ok", "ort_qdq": "ok", "ort_qoperator": "ok"}
    assert report.samples.source == "generated" and report.samples.calibration_count == 16
    assert report.artifacts["pt2e_qdq"].tool.settings["calibration_samples"] == 16
    assert "HistogramObserver" in report.artifacts["pt2e_qdq"].tool.calibration
    assert "MinMax" in report.artifacts["ort_qdq"].tool.calibration
    assert report.model.resolved_input_shapes == {"x": [1, 3, 16, 16]}
    # The JSON round-trips through the schema (what the API and the client rely on).
    from service.schemas.report import Report

    assert Report.model_validate_json(report.model_dump_json()) == report


def test_per_tensor_option_reaches_both_tools(compared):
    report, _ = compared("conv_relu", pt2e={"per_channel": False})
    for name in ("pt2e_qdq", "ort_qdq"):
        weights = [t for t in report.artifacts[name].quantization.tensors if t.role == "weight"]
        assert weights and not any(t.per_channel for t in weights), name


def test_a_failing_path_fails_alone(compared):
    # An unknown extra option makes ORT's quantize_static raise; PT2E must not be affected.
    report, _ = compared("conv_relu", artifacts=["pt2e_qdq", "ort_qdq"],
                         ort={"op_types_to_quantize": ["Conv"], "calibrate_method": "percentile",
                              "extra_options": {"CalibPercentile": "not a number"}})
    assert report.artifacts["pt2e_qdq"].status == "ok"
    failed = report.artifacts["ort_qdq"]
    assert failed.status == "failed"
    assert failed.error.stage == "quantize" and failed.error.hint
    assert "/" + "tmp" not in failed.error.message  # no server paths


def test_fp32_export_names_the_batch_dim_as_the_model_declares(compared):
    """A downloaded fp32.onnx re-uploads without options: its batch dim is 'batch', not torch's 's77'."""
    _, workdir = compared("conv_relu")
    model = onnx.load(str(workdir / "artifacts" / "fp32.onnx"))
    dims = [[d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in [*model.graph.input, *model.graph.output]]
    assert dims == [["batch", 3, 16, 16], ["batch", 8, 16, 16]]
