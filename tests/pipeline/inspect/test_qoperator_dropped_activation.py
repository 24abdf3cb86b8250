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
