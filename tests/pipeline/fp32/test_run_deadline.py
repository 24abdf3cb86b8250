"""A run that never ends: a Loop whose trip count is an input's value (docs/history/notes.md, eighteenth pass,
"seen, not fixed"). Before, the fp32 stage's first inference ran until the job's time limit on a server
(the worker killed, job_timeout with a hint to raise it) and for ever in the CLI. Now every fp32 check run
is stopped by ORT past ``budgets.max_run_seconds`` (``ort_sessions.run_within``) and the job is refused with
``budget_exceeded`` naming the Loop, the input and its value. Real ORT throughout; each test under ~5 s."""
from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.errors import BudgetExceeded, UnsupportedModel
from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.context import RunLimits
from service.pipeline.inputs.safety import Budgets, onnx_model_from_path
from service.schemas.options import ComparisonOptions
from service.pipeline.ort.sessions import RunPastDeadline, run_within, session_for

F = TensorProto.FLOAT
QUICK = {"artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 2,
         "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}
FOREVER = 10**12  # trips: days of ORT time


def loop_counting_to_n(*, empty_body: bool = False) -> onnx.ModelProto:
    """y = x @ W + 0.001 * n: a Loop of ``n`` trips, ``n`` a scalar int64 input."""
    state = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("acc_in", F, [1, 4])]
    if empty_body:  # the body passes its inputs through: no node at all
        body = helper.make_graph([], "body", state, [state[1], state[2]])
    else:
        body = helper.make_graph(
            [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["acc_in", "step"], ["acc_out"])],
            "body", state, [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                            helper.make_tensor_value_info("acc_out", F, [1, 4])],
            [numpy_helper.from_array(np.full([1, 4], 0.001, np.float32), "step")])
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
         helper.make_node("Loop", ["n", "keep_going", "xw"], ["y"], name="count", body=body)],
        "g", [helper.make_tensor_value_info("x", F, [1, 4]), helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", F, [1, 4])], [w, numpy_helper.from_array(np.array(True), "keep_going")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def loop_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("deadline") / "loop.onnx"
    onnx.save(loop_counting_to_n(), path)
    return path


def _feed(n: int) -> dict:
    return {"x": np.ones([1, 4], np.float32), "n": np.array(n, np.int64)}


def _run_in_thread(fn) -> tuple[threading.Thread, list]:
    outcome: list = []

    def target():
        try:
            outcome.append(fn())
        except Exception as e:  # noqa: BLE001 - what the run ended with is the finding
            outcome.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, outcome


def test_ort_stops_a_loop_between_body_nodes_only_once_terminate_is_set(loop_file):
    """The toggle: the same run goes on while RunOptions.terminate is false and ends once it is set."""
    session = session_for(loop_file, "disable_all")
    run_options = ort.RunOptions()
    thread, outcome = _run_in_thread(lambda: session.run(None, _feed(FOREVER), run_options))
    thread.join(0.5)
    assert thread.is_alive()  # 10^12 trips: still running
    run_options.terminate = True
    thread.join(5)
    assert not thread.is_alive(), "ORT did not stop the Loop once terminate was set"
    assert "terminate flag" in str(outcome[0])


def test_run_within_stops_a_run_past_its_deadline_and_returns_one_that_ends(loop_file):
    session = session_for(loop_file, "disable_all")
    started = time.monotonic()
    with pytest.raises(RunPastDeadline):
        run_within(session, _feed(FOREVER), 0.3)
    assert time.monotonic() - started < 3
    (y,) = run_within(session, _feed(3), 5.0)
    x = np.ones([1, 4], np.float32)
    w = numpy_helper.to_array(loop_counting_to_n().graph.initializer[0])
    np.testing.assert_allclose(y, x @ w + 0.003, rtol=1e-6)


def test_ort_never_checks_terminate_in_a_loop_whose_body_has_no_node():
    """Why the safety check refuses such a Loop: terminate set at 0.1 s, and 8 million empty trips
    (~2 s here) still run to the end and return."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(loop_counting_to_n(empty_body=True).SerializeToString(), so,
                                   providers=["CPUExecutionProvider"])
    run_options = ort.RunOptions()
    thread, outcome = _run_in_thread(lambda: session.run(None, _feed(8_000_000), run_options))
    time.sleep(0.1)
    run_options.terminate = True
    thread.join(30)
    assert not thread.is_alive() and isinstance(outcome[0], list), outcome


def test_a_loop_with_an_empty_body_and_a_computed_trip_count_is_refused_at_the_upload(tmp_path):
    path = tmp_path / "empty.onnx"
    onnx.save(loop_counting_to_n(empty_body=True), path)
    with pytest.raises(UnsupportedModel, match="no node in its body and no constant trip count"):
        onnx_model_from_path(path)


def test_a_trip_count_from_the_options_is_refused_in_the_fp32_stage_naming_the_input(loop_file, tmp_path):
    options = ComparisonOptions.model_validate({**QUICK, "input_values": {"n": {"constant": FOREVER}}})
    stages = []
    started = time.monotonic()
    with pytest.raises(BudgetExceeded) as e:
        run_comparison(ComparisonRequest(model_path=loop_file, model_name="loop.onnx", options=options,
                                         limits=RunLimits(budgets=Budgets(max_run_seconds=0.5))), tmp_path / "job",
                       progress=lambda stage, done, total: stages.append(stage))
    assert time.monotonic() - started < 10
    assert stages[-1] == "fp32" and e.value.details["budget"] == "max_run_seconds"
    assert e.value.details["stage"] == "fp32"
    assert "first calibration sample within 0.5 s" in e.value.message
    assert f"Loop 'count' takes its trip count or exit from input 'n' (= {FOREVER} in that sample)" in e.value.message
    assert '"input_values": {"n"' in e.value.hint and "max_run_seconds" in e.value.hint


def test_a_later_sample_s_trip_count_is_checked_too(loop_file, tmp_path):
    """The first sample ends at once; the second evaluation sample would run for days."""
    npz = tmp_path / "samples.npz"
    np.savez(npz, x=np.ones([4, 1, 4], np.float32), n=np.array([2, 3, 4, FOREVER], np.int64))
    options = ComparisonOptions.model_validate(QUICK)
    with pytest.raises(BudgetExceeded, match="on evaluation sample 2 within 0.5 s"):
        run_comparison(ComparisonRequest(model_path=loop_file, model_name="loop.onnx", options=options,
                                         calibration_path=npz, limits=RunLimits(budgets=Budgets(max_run_seconds=0.5))), tmp_path / "job")


def test_bounded_trip_counts_run_the_job_as_before(loop_file, tmp_path):
    options = ComparisonOptions.model_validate({**QUICK, "input_values": {"n": {"low": 1, "high": 50}}})
    report = run_comparison(ComparisonRequest(model_path=loop_file, model_name="loop.onnx", options=options,
                                              limits=RunLimits(budgets=Budgets(max_run_seconds=5))), tmp_path / "job")
    assert report.artifacts["fp32"].status == "ok" and report.artifacts["ort_qdq"].status == "ok"


def test_a_while_loop_whose_exit_never_comes_is_stopped_too(tmp_path):
    """No trip count; the body's condition (max |v| > 0) holds for any input that is not all zeros."""
    state = [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("v", F, [1, 4])]
    body = helper.make_graph(
        [helper.make_node("Mul", ["v", "one"], ["vo"]), helper.make_node("Abs", ["vo"], ["a"]),
         helper.make_node("ReduceMax", ["a"], ["m"], keepdims=0), helper.make_node("Greater", ["m", "zero"], ["co"])],
        "body", state, [helper.make_tensor_value_info("co", TensorProto.BOOL, []), helper.make_tensor_value_info("vo", F, [1, 4])])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Loop", ["", "keep_going", "x"], ["y"], name="spin", body=body)],
        "g", [helper.make_tensor_value_info("x", F, [1, 4])], [helper.make_tensor_value_info("y", F, [1, 4])],
        [numpy_helper.from_array(np.array(True), "keep_going"), numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "spin.onnx")
    with pytest.raises(BudgetExceeded) as e:
        run_comparison(ComparisonRequest(model_path=tmp_path / "spin.onnx", options=ComparisonOptions.model_validate(QUICK),
                                         limits=RunLimits(budgets=Budgets(max_run_seconds=0.5))), tmp_path / "job")
    assert "It holds a Loop" in e.value.message and "loops end in a few steps" in e.value.hint
