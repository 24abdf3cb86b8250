"""If / Loop converters against ORT: If on a condition that folds (a constant, or static shape
arithmetic), Loop with a folded trip count and a static body condition, unrolled; refusals that
name the node for data-dependent conditions, trip counts and exits."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_parity import assert_matches_ort, make_model, ort_outputs, rand, torch_module
from onnx_torch.module import ConversionError
from tests import models

RNG = np.random.default_rng(4)
F32 = TensorProto.FLOAT


def _if_model(cond_nodes, cond_name, *, feeds_extra=None, inits=None):
    x = rand(RNG, 2, 3)
    node = helper.make_node("If", [cond_name], ["Y"], name="if0",
                            then_branch=models.branch("Relu", ["X"], "t_out"), else_branch=models.branch("Neg", ["X"], "e_out"))
    feeds = {"X": x, **(feeds_extra or {})}
    return make_model(cond_nodes + [node], feeds, ["Y"], initializers=inits), feeds


@pytest.mark.parametrize("flag", [True, False], ids=["then", "else"])
def test_if_on_a_constant_runs_only_that_branch(flag):
    import torch

    model, feeds = _if_model([], "C", inits={"C": np.array(flag)})
    assert_matches_ort(model, feeds, export=True)
    program = torch.export.export(torch_module(model, feeds), (torch.from_numpy(feeds["X"]),))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert ("aten.relu.default" in targets) == flag and not any("cond" in t for t in targets), targets


def test_if_on_static_shape_arithmetic_folds():
    nodes = [helper.make_node("Size", ["X"], ["n"]),
             helper.make_node("Greater", ["n", "ten"], ["C"])]
    model, feeds = _if_model(nodes, "C", inits={"ten": np.array(4, np.int64)})
    assert_matches_ort(model, feeds)


@pytest.mark.parametrize("flag", [True, False], ids=["then", "else"])
def test_if_on_input_data_computes_both_branches_and_selects(flag):
    import torch

    model, feeds = _if_model([], "C", feeds_extra={"C": np.array(True)})
    module = torch_module(model, feeds)  # built with C=True; must follow C at run time
    run = {**feeds, "C": np.array(flag)}
    want = ort_outputs(model, run)[0]
    args = tuple(torch.from_numpy(a) for a in run.values())
    np.testing.assert_allclose(module(*args).numpy(), want, rtol=1e-6)
    program = torch.export.export(module, tuple(torch.from_numpy(a) for a in feeds.values()))
    np.testing.assert_allclose(program.module()(*args).numpy(), want, rtol=1e-6)


def test_if_on_input_data_with_branches_of_different_shapes_is_refused_by_name():
    x = rand(RNG, 2, 3)
    then_g = models.branch("Relu", ["X"], "t_out")
    else_g = models.branch("ReduceSum", ["X"], "e_out", keepdims=0)
    node = helper.make_node("If", ["C"], ["Y"], name="if_shapes", then_branch=then_g, else_branch=else_g)
    feeds = {"X": x, "C": np.array(True)}
    model = make_model([node], feeds, ["Y"])
    with pytest.raises(ConversionError, match="if_shapes.*depends on the input data.*differ"):
        torch_module(model, feeds)


def _loop_model(*, trip=4, cond="true", body_cond="pass", scan=True, use_iter=False):
    """v = X0; for i < trip: v = v + X (+ i); scan v * 2."""
    x = rand(RNG, 2, 3)
    body_nodes = []
    acc = "v_in"
    if use_iter:
        body_nodes += [helper.make_node("Cast", ["i"], ["i_f"], to=F32),
                       helper.make_node("Add", ["v_in", "i_f"], ["v_i"])]
        acc = "v_i"
    body_nodes.append(helper.make_node("Add", [acc, "X"], ["v_out"]))
    body_outputs = ["c_out", "v_out"]
    if scan:
        body_nodes.append(helper.make_node("Mul", ["v_out", "two"], ["s_out"]))
        body_outputs.append("s_out")
    if body_cond == "pass":
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    elif body_cond == "false":
        body_nodes.append(helper.make_node("Constant", [], ["c_out"], value=helper.make_tensor("f", TensorProto.BOOL, [], [False])))
    else:  # data-dependent: continue while sum(v) < 100
        body_nodes += [helper.make_node("ReduceSum", ["v_out"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "hundred"], ["c_out"])]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F32, None)],
        [helper.make_tensor_value_info(n, TensorProto.BOOL if n == "c_out" else F32, None) for n in body_outputs])
    inits = {"two": np.array(2.0, np.float32), "hundred": np.array(100.0, np.float32)}
    loop_inputs = ["", "", "X0"]
    if trip is not None:
        inits["M"] = np.array(trip, np.int64)
        loop_inputs[0] = "M"
    if cond is not None:
        inits["cond"] = np.array(cond == "true")
        loop_inputs[1] = "cond"
    outputs = ["V"] + (["S"] if scan else [])
    node = helper.make_node("Loop", loop_inputs, outputs, name="loop0", body=body)
    feeds = {"X": x, "X0": rand(RNG, 2, 3)}
    return make_model([node], feeds, outputs, initializers=inits), feeds


def test_loop_with_folded_trip_count_unrolls_with_scan_outputs():
    model, feeds = _loop_model()
    assert_matches_ort(model, feeds, export=True)


def test_loop_reads_the_iteration_number():
    assert_matches_ort(*_loop_model(use_iter=True, trip=3))


def test_loop_for_form_without_condition_input():
    assert_matches_ort(*_loop_model(cond=None, trip=3))


def test_loop_body_condition_constant_false_stops_after_one_pass_in_ort_too():
    """ORT reads the body's condition output after each iteration even without a condition input."""
    model, feeds = _loop_model(cond=None, trip=5, body_cond="false")
    v, s = ort_outputs(model, feeds)
    assert s.shape[0] == 1
    assert_matches_ort(model, feeds)


def test_loop_with_initial_condition_false_keeps_the_initial_values():
    model, feeds = _loop_model(cond="false", scan=False)
    got = assert_matches_ort(model, feeds)
    np.testing.assert_array_equal(got[0], feeds["X0"])


def test_loop_with_a_data_dependent_exit_is_refused_by_name():
    model, feeds = _loop_model(body_cond="data")
    with pytest.raises(ConversionError, match="loop0.*data-dependent exit"):
        torch_module(model, feeds)


def test_loop_with_a_runtime_trip_count_is_refused_by_name():
    model, feeds = _loop_model(trip=None)
    model.graph.node[0].input[0] = "M_in"
    model.graph.input.append(helper.make_tensor_value_info("M_in", TensorProto.INT64, []))
    feeds = {**feeds, "M_in": np.array(3, np.int64)}
    with pytest.raises(ConversionError, match="loop0.*trip count"):
        torch_module(model, feeds)


def test_loop_too_long_to_unroll_is_refused():
    model, feeds = _loop_model(trip=100_000, scan=False)
    with pytest.raises(ConversionError, match="loop0.*100000 iterations"):
        torch_module(model, feeds)


def _core_folds_subgraph_constants() -> bool:
    from onnx_torch import module

    return bool(getattr(module._Context, "const_subgraph_inputs", False))


@pytest.mark.skipif(not _core_folds_subgraph_constants(),
                    reason="the core does not fold constant subgraph inputs yet (/work/helpers/C2_NEEDS.md #1)")
def test_loop_slicing_with_the_iteration_number():
    """for i < 3: v += X[i:i+1] - the body's Slice needs i as a constant of each unrolled copy."""
    body = helper.make_graph([
        helper.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
        helper.make_node("Add", ["i1", "one"], ["i2"]),
        helper.make_node("Slice", ["X", "i1", "i2", "zero"], ["row"]),
        helper.make_node("Add", ["v_in", "row"], ["v_out"]),
        helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F32, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, None),
         helper.make_tensor_value_info("v_out", F32, None)])
    feeds = {"X": rand(RNG, 3, 4), "V0": np.zeros((1, 4), np.float32)}
    inits = {"M": np.array(3, np.int64), "zero": np.array([0], np.int64), "one": np.array([1], np.int64)}
    model = make_model([helper.make_node("Loop", ["M", "", "V0"], ["V"], body=body)], feeds, ["V"],
                       initializers=inits)
    assert_matches_ort(model, feeds, export=True)


def _scan_model(*, in_axis=0, in_dir=0, out_axis=0, out_dir=0):
    """Cumulative sum over a scan axis: state += x_t; outputs state * 2 per step."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "two"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", F32, None), helper.make_tensor_value_info("x_t", F32, None)],
        [helper.make_tensor_value_info("s_out", F32, None), helper.make_tensor_value_info("y_t", F32, None)],
        initializer=[__import__("onnx").numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    x = rand(RNG, 4, 3, 2)
    state_shape = [d for k, d in enumerate(x.shape) if k != in_axis]
    feeds = {"S0": rand(RNG, *state_shape), "X": x}
    node = helper.make_node("Scan", ["S0", "X"], ["S", "Y"], name="scan0", body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    return make_model([node], feeds, ["S", "Y"], opset=16), feeds


SCANS = {
    "axis 0 forward": {},
    "input axis 1 reverse": {"in_axis": 1, "in_dir": 1},
    "output axis -1 reversed": {"out_axis": -1, "out_dir": 1},
    "input axis 2, output axis 1": {"in_axis": 2, "out_axis": 1},
}


@pytest.mark.parametrize("case", list(SCANS), ids=list(SCANS))
def test_scan_unrolls_over_the_static_scan_length(case):
    model, feeds = _scan_model(**SCANS[case])
    assert_matches_ort(model, feeds, export=case == "axis 0 forward")


def _counter_loop(*, limit_from_shape: bool):
    """tf2onnx's while loop of a Keras RNN: v += X while And(Less(i, n), Less(k + 1, n)), k a carried
    counter from 0, n the number of rows of X (from its Shape when ``limit_from_shape``) or a
    constant; the trip count (10) is larger than n, so the body's condition decides."""
    body_nodes = [helper.make_node("Add", ["v_in", "X"], ["v_out"]),
                  helper.make_node("Add", ["k_in", "one"], ["k_out"]),
                  helper.make_node("Less", ["i", "n"], ["i_less"]),
                  helper.make_node("Less", ["k_out", "n"], ["k_less"]),
                  helper.make_node("And", ["i_less", "k_less"], ["c_out"]),
                  helper.make_node("Mul", ["v_out", "two"], ["s_out"])]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F32, None), helper.make_tensor_value_info("k_in", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, None), helper.make_tensor_value_info("v_out", F32, None),
         helper.make_tensor_value_info("k_out", TensorProto.INT64, None), helper.make_tensor_value_info("s_out", F32, None)])
    inits = {"M": np.array(10, np.int64), "cond": np.array(True), "k0": np.array(0, np.int64),
             "one": np.array(1, np.int64), "two": np.array(2.0, np.float32)}
    nodes = []
    if limit_from_shape:
        inits.update(start=np.array([0], np.int64), stop=np.array([1], np.int64))
        nodes += [helper.make_node("Shape", ["X"], ["shape"]), helper.make_node("Slice", ["shape", "start", "stop"], ["rows"]),
                  helper.make_node("Squeeze", ["rows"], ["n"])]
    else:
        inits["n"] = np.array(4, np.int64)
    nodes.append(helper.make_node("Loop", ["M", "cond", "X0", "k0"], ["V", "K", "S"], name="loop0", body=body))
    feeds = {"X": rand(RNG, 4, 3), "X0": rand(RNG, 4, 3)}
    return make_model(nodes, feeds, ["V", "S"], initializers=inits), feeds


@pytest.mark.parametrize("limit_from_shape", [False, True], ids=["constant limit", "limit from a shape"])
def test_loop_whose_exit_reads_a_carried_counter_unrolls_to_its_static_exit(limit_from_shape):
    """The chars2vec LSTM (tf2onnx): refused as a data-dependent exit before; the exit reads only the
    iteration number, a counter that starts at a constant, and a limit that folds. ORT stops after 4
    of the 10 trips (the 4th makes k + 1 < 4 false), and the unrolled module does too."""
    model, feeds = _counter_loop(limit_from_shape=limit_from_shape)
    _, s = ort_outputs(model, feeds)
    assert s.shape[0] == 4
    assert_matches_ort(model, feeds, export=True)


@pytest.mark.parametrize("with_exit", [False, True], ids=["pass-through condition", "exit on the counter"])
def test_loop_slicing_with_a_carried_counter(with_exit):
    """paddle2onnx's loops (SLANet's decoder) index with a loop-carried counter, not the iteration
    number: k starts at a constant and the body writes k + 1. Refused before with "Slice: starts
    (input 1) is computed at run time"; the counter is a constant of each unrolled copy."""
    nodes = [helper.make_node("Add", ["k_in", "one"], ["k_out"]),
             helper.make_node("Slice", ["X", "k_in", "k_out", "zero"], ["row"]),
             helper.make_node("Add", ["v_in", "row"], ["v_out"])]
    if with_exit:
        nodes += [helper.make_node("Squeeze", ["k_out", "zero"], ["k_s"]),
                  helper.make_node("Less", ["k_s", "three"], ["c_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    body = helper.make_graph(nodes, "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("k_in", TensorProto.INT64, None),
                              helper.make_tensor_value_info("v_in", F32, None)],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, None),
                              helper.make_tensor_value_info("k_out", TensorProto.INT64, None),
                              helper.make_tensor_value_info("v_out", F32, None)])
    feeds = {"X": rand(RNG, 4, 3), "V0": np.zeros((1, 3), np.float32)}
    inits = {"M": np.array(10 if with_exit else 3, np.int64), "cond": np.array(True),
             "k0": np.array([0], np.int64), "zero": np.array([0], np.int64), "one": np.array([1], np.int64),
             **({"three": np.array(3, np.int64)} if with_exit else {})}
    model = make_model([helper.make_node("Loop", ["M", "cond", "k0", "V0"], ["K", "V"], name="loop0", body=body)],
                       feeds, ["V"], initializers=inits)
    assert_matches_ort(model, feeds, export=True)
