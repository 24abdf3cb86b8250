"""ORT's QOperator quantizer drops a Relu whose input another node also reads (twentieth pass): the job
'passed' with ort_qoperator's Relu output at -0.6 dB and no word on why. The lint names the Relu and the way
out; with that Relu excluded, the same figure is int8 rounding again. Real ORT, the file it wrote read back."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions

F = TensorProto.FLOAT
QUICK = {"artifacts": ["ort_qdq", "ort_qoperator"], "levels": ["disable_all"], "calibration_samples": 8,
         "eval_samples": 2, "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}


@pytest.fixture(scope="module")
def relu_beside_sigmoid(tmp_path_factory):
    """y = x @ W read by Relu and by Sigmoid."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32) * 0.3, "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"), helper.make_node("Relu", ["y"], ["r"], name="relu"),
         helper.make_node("Sigmoid", ["y"], ["s"], name="sigmoid")],
        "g", [helper.make_tensor_value_info("x", F, [1, 8])],
        [helper.make_tensor_value_info("r", F, [1, 8]), helper.make_tensor_value_info("s", F, [1, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("relu") / "relu_two_readers.onnx"
    onnx.save(model, path)
    return path


def _sqnr(report, artifact, output):
    numerics = report.artifacts[artifact].optimized["disable_all"].numerics
    return next(o.sqnr_db for o in numerics.outputs if o.name == output)


def test_the_dropped_relu_is_named_and_excluding_it_brings_the_figure_back(relu_beside_sigmoid, tmp_path):
    report = run_comparison(ComparisonRequest(model_path=relu_beside_sigmoid, options=ComparisonOptions.model_validate(QUICK)),
                            tmp_path / "as_is")
    qop = onnx.load(str(tmp_path / "as_is" / "artifacts" / "ort_qoperator.onnx"))
    assert "Relu" not in {n.op_type for n in qop.graph.node}  # what ORT wrote: the Relu is gone
    assert _sqnr(report, "ort_qoperator", "r") < 10 < 30 < _sqnr(report, "ort_qdq", "r")
    (lint,) = [x for x in report.lints if x.code == "qoperator_dropped_activation"]
    assert lint.artifact == "ort_qoperator" and "Relu 'relu' (input 'y')" in lint.message
    assert "nodes_to_exclude = ['relu']" in lint.hint

    fixed = ComparisonOptions.model_validate({**QUICK, "ort": {"nodes_to_exclude": ["relu"]}})
    report = run_comparison(ComparisonRequest(model_path=relu_beside_sigmoid, options=fixed), tmp_path / "excluded")
    assert _sqnr(report, "ort_qoperator", "r") > 30
    assert not [x for x in report.lints if x.code == "qoperator_dropped_activation"]


@pytest.fixture(scope="module")
def tf2onnx_prelu(tmp_path_factory):
    """tf2onnx's PReLU: h = x @ W; y = Relu(h) + alpha * Relu(Neg(h)). Both readers of the Relu's output are
    quantized in the QOperator file, so nothing dequantizes it: the tensor is simply gone (issue 42)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["pos"], name="relu"),
             helper.make_node("Neg", ["h"], ["nh"], name="neg"),
             helper.make_node("Relu", ["nh"], ["rn"], name="relu_neg"),
             helper.make_node("Mul", ["rn", "alpha"], ["negpart"], name="scale"),
             helper.make_node("Add", ["pos", "negpart"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 16])],
                              [helper.make_tensor_value_info("y", F, [1, 16])],
                              [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, "W"),
                               numpy_helper.from_array(np.full((16,), -0.25, np.float32), "alpha")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("prelu") / "prelu.onnx"
    onnx.save(model, path)
    return path


def test_a_dropped_relu_whose_output_is_gone_from_the_file_is_named(tf2onnx_prelu, tmp_path):
    report = run_comparison(ComparisonRequest(model_path=tf2onnx_prelu, options=ComparisonOptions.model_validate(QUICK)),
                            tmp_path / "as_is")
    qop = onnx.load(str(tmp_path / "as_is" / "artifacts" / "ort_qoperator.onnx"))
    assert "pos" not in {o for n in qop.graph.node for o in n.output}  # no DequantizeLinear writes it: gone
    assert _sqnr(report, "ort_qoperator", "y") < _sqnr(report, "ort_qdq", "y") - 6
    (lint,) = [x for x in report.lints if x.code == "qoperator_dropped_activation"]
    assert "Relu 'relu' (input 'h')" in lint.message and "relu_neg" not in lint.message
    assert "nodes_to_exclude = ['relu']" in lint.hint

    fixed = ComparisonOptions.model_validate({**QUICK, "ort": {"nodes_to_exclude": ["relu"]}})
    again = run_comparison(ComparisonRequest(model_path=tf2onnx_prelu, options=fixed), tmp_path / "excluded")
    assert _sqnr(again, "ort_qoperator", "y") > _sqnr(report, "ort_qoperator", "y") + 6
    assert not [x for x in again.lints if x.code == "qoperator_dropped_activation"]
