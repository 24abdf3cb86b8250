"""The PT2E path's graph-size budget (``options.pt2e.max_graph_ops``): a torch graph bigger than it
is refused before PT2E starts, naming the upload's nodes that made it big, while the ORT paths run.

Why it exists: unrolled recurrences grow the graph by tens of ops per step, and PT2E plus
torch.onnx.export take ~40 ms per op on this stack (docs/history/notes.md, ninth pass): six peephole
LSTMs over 100 frames ran past 900 s and the job ended with no report at all."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pt2e_upload import pt2e_of_upload

SEQ, IN, HID = 6, 4, 5


def _peephole_lstms(path, layers: int = 2):
    """``layers`` stacked LSTMs with peepholes (a variant torch has no op for: always unrolled)."""
    rng = np.random.default_rng(0)
    nodes, inits, cur, width = [], [numpy_helper.from_array(np.array([1], np.int64), "one")], "x", IN
    for i in range(layers):
        for name, shape in ((f"W{i}", (1, 4 * HID, width)), (f"R{i}", (1, 4 * HID, HID)), (f"P{i}", (1, 3 * HID))):
            inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name))
        nodes.append(helper.make_node("LSTM", [cur, f"W{i}", f"R{i}", "", "", "", "", f"P{i}"], [f"Y{i}"],
                                      name=f"lstm{i}", hidden_size=HID))
        nodes.append(helper.make_node("Squeeze", [f"Y{i}", "one"], [f"S{i}"], name=f"squeeze{i}"))
        cur, width = f"S{i}", HID
    graph = helper.make_graph(nodes, "lstms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, 1, IN])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [SEQ, 1, HID])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def lstms(tmp_path_factory):
    return _peephole_lstms(tmp_path_factory.mktemp("budget") / "lstms.onnx")


def test_a_graph_past_the_budget_is_refused_naming_the_nodes_that_made_it(lstms, tmp_path):
    from service.pipeline.quantize.pt2e_from_onnx.program import ConversionSkipped

    with pytest.raises(ConversionSkipped) as info:
        pt2e_of_upload(lstms, tmp_path / "pt2e.onnx", max_graph_ops=50)
    e = info.value
    assert e.stage == "convert" and not (tmp_path / "pt2e.onnx").exists()
    assert "more than options.pt2e.max_graph_ops (50)" in str(e)
    assert re.search(r"LSTM 'lstm0' \(\d+ ops\)", str(e)) and "LSTM 'lstm1'" in str(e)
    assert "options.input_shapes" in e.hint and "max_graph_ops" in e.hint
    assert e.conversion.parity["ok"] is True  # what the conversion learnt is still reported


def test_the_same_graph_within_the_budget_quantizes(lstms, tmp_path, monkeypatch):
    """The count the refusal states is the graph's: a budget of exactly that many ops lets it through."""
    import service.pipeline.quantize.pt2e_from_onnx.program as program
    from service.pipeline.quantize.pt2e_from_onnx.program import ConversionSkipped

    monkeypatch.setattr(program, "EARLY_FACTOR", 10**9)  # the exact count on the exported program, not the build's
    with pytest.raises(ConversionSkipped) as info:
        pt2e_of_upload(lstms, tmp_path / "refused.onnx", max_graph_ops=1)
    ops = int(re.search(r"the torch graph has (\d+) ops", str(info.value)).group(1))
    assert ops > 2 * SEQ * 10  # tens of ops per unrolled step
    tool, _ = pt2e_of_upload(lstms, tmp_path / "pt2e.onnx", max_graph_ops=ops)
    assert (tmp_path / "pt2e.onnx").exists() and tool.conversion["ops"]["LSTM"] == 2


def test_the_job_reports_the_refusal_and_runs_the_ort_paths(lstms, tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False},
        "pt2e": {"max_graph_ops": 50}})
    report = run_comparison(ComparisonRequest(model_path=lstms, model_name="lstms.onnx", options=options),
                            tmp_path / "job")
    pt2e, ort = report.artifacts["pt2e_qdq"], report.artifacts["ort_qdq"]
    assert pt2e.status == "skipped" and "max_graph_ops (50)" in pt2e.error.message
    assert ort.status == "ok" and ort.optimized["disable_all"].numerics is not None


def test_a_torch_program_past_the_budget_is_skipped_before_pt2e(tmp_path):
    """A .pt2 (here a built-in example) has no upload nodes to name: the count and the options."""
    from service.errors import PathSkipped
    from service.pipeline.inputs.sources import source_from_example
    from service.pipeline.quantize.pt2e_from_onnx.program import ConversionSkipped
    from service.pipeline.quantize.pt2e import Pt2eInput, qdq_from_pt2e

    source = source_from_example("conv_relu")
    with pytest.raises(PathSkipped) as info:
        qdq_from_pt2e(Pt2eInput(source, {"x": (1, 3, 16, 16)}, [], max_graph_ops=1), tmp_path / "pt2e.onnx")
    assert not isinstance(info.value, ConversionSkipped) and info.value.stage == "quantize"
    assert "more than options.pt2e.max_graph_ops (1)" in str(info.value) and "the most from" not in str(info.value)
    assert "recurrences" not in info.value.hint and "options.artifacts" in info.value.hint


def _decode_loop_file(tmp_path, *, then_relu: bool):
    """A 12-step Loop 'decode' (M an initializer) whose body is one Mul and one Add on the carried value,
    its condition passed through; then a Relu when asked."""
    body = helper.make_graph([helper.make_node("Mul", ["v_in", "X"], ["m"], name="body_mul"),
                              helper.make_node("Add", ["m", "X"], ["v_out"], name="body_add"),
                              helper.make_node("Identity", ["c_in"], ["c_out"], name="body_cond")], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_in", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, None),
                              helper.make_tensor_value_info("v_out", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Loop", ["M", "", "X"], ["V" if then_relu else "y"], name="decode", body=body)]
    if then_relu:
        nodes.append(helper.make_node("Relu", ["V"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "loop", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array(12, np.int64), "M")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "loop.onnx"
    onnx.save(model, str(path))
    return path


def test_the_ops_of_a_loop_body_count_for_the_loop(tmp_path):
    """PaddleOCR's SLANet: 501 unrolled decoder steps, 49609 ops, and the refusal named "Loop (5011 ops),
    OneHot (4500 ops), Split (2004 ops)": the body's nodes were counted under their own names, the Loop
    under the few ops that were its own. A body of Mul and Add, 12 steps: the Loop owns them all."""
    from service.pipeline.quantize.pt2e_from_onnx.program import ConversionSkipped

    path = _decode_loop_file(tmp_path, then_relu=True)
    with pytest.raises(ConversionSkipped) as info:
        pt2e_of_upload(path, tmp_path / "pt2e.onnx", max_graph_ops=5)
    counted = re.search(r"the most from Loop 'decode' \((\d+) ops\)", str(info.value))
    assert counted and int(counted.group(1)) >= 24, str(info.value)
    assert "body_mul" not in str(info.value)


@pytest.mark.parametrize("cap, early", [(5, True), (20, False)])
def test_a_module_far_past_the_cap_is_refused_before_torch_export(tmp_path, cap, early):
    """SLANet: 92 of its 105 s went to torch.export of the unrolled decoder that the exact count then
    refused. The build run's count (26 ops kept here: 12 steps of Mul + Add, the Loop, the Relu) past
    twice the cap refuses right after the build; under twice the cap the exported program's exact count
    decides, as before."""
    from service.pipeline.quantize.pt2e_from_onnx.program import GraphTooLarge

    path = _decode_loop_file(tmp_path, then_relu=True)
    with pytest.raises(GraphTooLarge) as info:
        pt2e_of_upload(path, tmp_path / "pt2e.onnx", max_graph_ops=cap)
    seconds = info.value.conversion.seconds
    assert ("export" not in seconds and "parity" not in seconds) == early, seconds
    assert ("the converted module calls 26 ops" if early else "the torch graph has") in str(info.value)
    assert f"more than options.pt2e.max_graph_ops ({cap})" in str(info.value)
    assert "Loop 'decode'" in str(info.value) and "'decode' runs up to 12 steps" in info.value.hint


def test_a_loop_with_a_constant_trip_count_is_not_offered_a_shorter_input(tmp_path):
    """SLANet's decoder runs 501 steps (M an initializer); the hint offered "a shorter sequence with
    options.input_shapes", which changes nothing there."""
    from service.pipeline.quantize.pt2e_from_onnx.program import ConversionSkipped

    path = _decode_loop_file(tmp_path, then_relu=False)
    with pytest.raises(ConversionSkipped) as info:
        pt2e_of_upload(path, tmp_path / "pt2e.onnx", max_graph_ops=5)
    hint = info.value.hint
    assert "'decode' runs up to 12 steps" in hint and "options.input_shapes" not in hint and "max_graph_ops" in hint
