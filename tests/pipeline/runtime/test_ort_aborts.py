"""ORT 1.32 aborts the whole process (a C++ assertion, SIGABRT) creating a session at level basic or
above when QDQPropagationTransformer carries a DequantizeLinear through a Reshape into a tensor an
If/Loop/Scan body reads from outside (qdq_propagation.cc, InsertQDQPairs). Before, the CLI died
with the assertion and a service job lost its worker; now the level fails with the reason.

Each statement is pinned in the installed ORT, in a child process (an abort cannot be caught):
changing one condition (a Relu between the Reshape and the body's read) makes the session load."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.ort.aborts import qdq_propagation_abort
from tests import models
from tests.realworld.corpus import build_per_class_nms_loop

_PROBE = """
import sys
import onnxruntime as ort
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel(int(sys.argv[2]))
so.log_severity_level = 3
ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
"""


def _model(path, *, relu_between=False, second_reader=False):
    """x -> Q -> DQ -> Reshape [-> Relu] -> read inside both branches of an If."""
    f = TensorProto.FLOAT
    read = "relu" if relu_between else "flat"
    then = models.branch("Identity", [read], "t", [8])
    other = models.branch("Neg", [read], "e", [8])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
             helper.make_node("Reshape", ["xd", "shape"], ["flat"])]
    if relu_between:
        nodes.append(helper.make_node("Relu", ["flat"], ["relu"]))
    outputs = [helper.make_tensor_value_info("y", f, [8])]
    if second_reader:  # the DQ has two readers: ORT gives each its own copy first (EnsureUniqueDQForNodeUnit)
        nodes.append(helper.make_node("Sigmoid", ["xd"], ["other"]))
        outputs.append(helper.make_tensor_value_info("other", f, [2, 4]))
    nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", f, [2, 4]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        outputs, [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "zp"),
                  numpy_helper.from_array(np.array([8], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return model


def _child_exit(path, level: int) -> int:
    return subprocess.run([sys.executable, "-c", _PROBE, str(path), str(level)], capture_output=True, timeout=120).returncode


@pytest.mark.parametrize("second_reader", [False, True])
def test_a_dequantized_reshape_read_inside_a_body_aborts_ort_and_the_rule_says_so(tmp_path, second_reader):
    model = _model(tmp_path / "m.onnx", second_reader=second_reader)
    assert qdq_propagation_abort(model) == "flat"
    assert _child_exit(tmp_path / "m.onnx", 1) < 0  # basic: killed by a signal (SIGABRT)
    assert _child_exit(tmp_path / "m.onnx", 0) == 0  # disable_all runs no transformer


def test_a_relu_between_stops_the_propagation_and_ort_loads(tmp_path):
    model = _model(tmp_path / "m.onnx", relu_between=True)
    assert qdq_propagation_abort(model) is None
    assert _child_exit(tmp_path / "m.onnx", 99) == 0


def test_the_session_helper_refuses_the_level_instead_of_dying(tmp_path):
    from service.errors import OrtWouldAbort
    from service.pipeline.ort.sessions import session_for

    _model(tmp_path / "m.onnx")
    with pytest.raises(OrtWouldAbort) as e:
        session_for(tmp_path / "m.onnx", "all")
    assert "'flat'" in e.value.message and "separate process" in e.value.message
    assert "QDQPropagationTransformer" in e.value.hint
    session_for(tmp_path / "m.onnx", "disable_all")  # the level ORT can run
    session_for(tmp_path / "m.onnx", "all", disabled_optimizers=["QDQPropagationTransformer"])  # the hint's way out


def test_a_job_on_a_per_class_nms_detector_reports_every_path_and_the_aborting_levels(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    build_per_class_nms_loop(tmp_path / "ssd.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq", "ort_qoperator"], "levels": ["disable_all", "basic", "all"],
        "calibration_samples": 4, "eval_samples": 2, "latency": {"enabled": False}, "advice": {"enabled": False},
        "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "ssd.onnx", model_name="ssd.onnx", options=options),
                            tmp_path / "job")
    arts = report.artifacts
    assert all(arts[a].status == "ok" for a in ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator")), \
        {a: arts[a].error for a in arts}
    assert any("Loop 'per_class'" in n for n in arts["pt2e_qdq"].tool.notes)  # the Loop is the float tail
    for name in ("pt2e_qdq", "ort_qoperator"):  # both files take the dequantized boxes into the Loop body
        assert arts[name].optimized["disable_all"].numerics is not None
        for level in ("basic", "all"):
            assert "ort_would_abort" in arts[name].optimized[level].error
    assert arts["ort_qdq"].optimized["all"].error is None  # its QuantizeLinear after the Transpose stops the propagation
    kept = arts["ort_qdq"].optimized["all"].numerics.outputs[0]
    assert kept.compared == "shape" and "Loop 'per_class' (its body holds a NonMaxSuppression)" in kept.data_dependent
