"""RNN / GRU / LSTM converters against ORT: forward, reverse, bidirectional; layout 0 and 1;
initial states; GRU linear_before_reset; LSTM peepholes, clip, input_forget; activations with
alpha/beta; static sequence_lens shorter than the sequence.

ORT's CPU kernels refuse layout=1 ("Batchwise recurrent operations (layout == 1) are not
supported", rnn.h / deep_cpu_gru.h / deep_cpu_lstm.h), so a layout=1 model is checked against ORT
running its layout=0 twin (same weights, batch-major data transposed in and out), and a test pins
that ORT still refuses layout=1."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from onnx_parity import assert_matches_ort, make_model, rand, torch_module

RNG = np.random.default_rng(3)
SEQ, BATCH, IN, HID = 5, 3, 4, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _rnn_model(op, *, direction="forward", layout=0, initial=False, bias=True, seq_lens=None, peepholes=False,
               opset=14, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = rand(RNG, *((BATCH, SEQ, IN) if layout else (SEQ, BATCH, IN)))
    inits = {"W": rand(RNG, dirs, g * HID, IN) * 0.5, "R": rand(RNG, dirs, g * HID, HID) * 0.5}
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits["B"] = rand(RNG, dirs, 2 * g * HID) * 0.5
        names[3] = "B"
    if seq_lens is not None:
        inits["L"] = np.asarray(seq_lens, np.int32)
        names[4] = "L"
    if initial:
        state_shape = (BATCH, dirs, HID) if layout else (dirs, BATCH, HID)
        inits["H0"] = rand(RNG, *state_shape)
        names[5] = "H0"
        if op == "LSTM":
            inits["C0"] = rand(RNG, *state_shape)
            names[6] = "C0"
    if peepholes:
        inits["P"] = rand(RNG, dirs, 3 * HID)
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    if opset >= 14:
        attrs["layout"] = layout
    node = helper.make_node(op, names, outputs, name="rnn0", hidden_size=HID, direction=direction, **attrs)
    return make_model(node, {"X": x}, outputs, initializers=inits, opset=opset), {"X": x}


OPS = ["RNN", "GRU", "LSTM"]
DIRECTIONS = ["forward", "reverse", "bidirectional"]


@pytest.mark.parametrize("layout", [0, 1], ids=["layout=0", "layout=1"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_rnn_family_matches_ort(op, direction, layout):
    _check(*_rnn_model(op, direction=direction, layout=layout, initial=True))


def _check(model, feeds):
    """assert_matches_ort, through the layout=0 twin when the model is batch-major."""
    node = model.graph.node[0]
    if not any(a.name == "layout" and a.i == 1 for a in node.attribute):
        assert_matches_ort(model, feeds, atol=1e-5)
        return
    import torch
    from onnx import numpy_helper

    from onnx_parity import ort_outputs

    twin = type(model)()
    twin.CopyFrom(model)
    for a in twin.graph.node[0].attribute:
        if a.name == "layout":
            a.i = 0
    for init in twin.graph.initializer:
        if init.name in ("H0", "C0"):
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).transpose(1, 0, 2).copy(), init.name))
    x0 = feeds["X"].transpose(1, 0, 2).copy()
    twin.graph.input[0].CopyFrom(helper.make_tensor_value_info("X", 1, list(x0.shape)))
    want = ort_outputs(twin, {"X": x0})
    want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    got = torch_module(model, feeds)(torch.from_numpy(feeds["X"]))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.detach().numpy(), w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_ort_cpu_refuses_layout_1(op):
    import onnxruntime

    from onnx_parity import ort_outputs

    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="layout == 1"):
        ort_outputs(*_rnn_model(op, layout=1))


@pytest.mark.parametrize("op", OPS)
def test_without_bias_or_initial_state_at_opset_9(op):
    assert_matches_ort(*_rnn_model(op, direction="bidirectional", bias=False, opset=9), atol=1e-5)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(direction):
    assert_matches_ort(*_rnn_model("GRU", direction=direction, initial=True, linear_before_reset=1), atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_peepholes_clip_input_forget(direction):
    assert_matches_ort(*_rnn_model("LSTM", direction=direction, initial=True, peepholes=True, clip=0.7), atol=1e-5)
    assert_matches_ort(*_rnn_model("LSTM", direction=direction, peepholes=True, input_forget=1), atol=1e-5)


@pytest.mark.parametrize("layout", [0, 1], ids=["layout=0", "layout=1"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_static_sequence_lens_shorter_than_the_sequence(op, direction, layout):
    _check(*_rnn_model(op, direction=direction, layout=layout, initial=True, seq_lens=[5, 2, 4]))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_zero_length_sequence_ends_with_zero_states_as_in_ort(op, direction):
    assert_matches_ort(*_rnn_model(op, direction=direction, initial=True, seq_lens=[5, 0, 3]), atol=1e-5)


def test_full_sequence_lens_is_the_plain_run():
    assert_matches_ort(*_rnn_model("LSTM", direction="bidirectional", seq_lens=[SEQ] * BATCH), atol=1e-5)


ACTS = {
    "RNN relu": ("RNN", {"activations": ["Relu"]}),
    "RNN leakyrelu alpha": ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.2]}),
    "GRU hardsigmoid + softsign": ("GRU", {"activations": ["HardSigmoid", "Softsign"],
                                           "activation_alpha": [0.3], "activation_beta": [0.4]}),
    "LSTM sigmoid, scaledtanh, affine": ("LSTM", {"activations": ["Sigmoid", "ScaledTanh", "Affine"],
                                                  "activation_alpha": [0.9, 0.5], "activation_beta": [1.1, 0.2]}),
    "bidirectional GRU two sets": ("GRU", {"direction": "bidirectional",
                                           "activations": ["Sigmoid", "Tanh", "HardSigmoid", "Elu"]}),
}


@pytest.mark.parametrize("case", list(ACTS), ids=list(ACTS))
def test_activations_with_alpha_beta(case):
    op, attrs = ACTS[case]
    assert_matches_ort(*_rnn_model(op, initial=True, **attrs), atol=1e-5)


def test_runtime_sequence_lens_is_refused_by_name():
    from onnx_torch.module import ConversionError

    x = rand(RNG, SEQ, BATCH, IN)
    lens = np.array([5, 2, 4], np.int32)
    inits = {"W": rand(RNG, 1, 3 * HID, IN), "R": rand(RNG, 1, 3 * HID, HID)}
    node = helper.make_node("GRU", ["X", "W", "R", "", "L"], ["Y"], name="gru_dyn", hidden_size=HID)
    model = make_model(node, {"X": x, "L": lens}, ["Y"], initializers=inits)
    with pytest.raises(ConversionError, match="gru_dyn.*sequence_lens"):
        torch_module(model, {"X": x, "L": lens})


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_rnn_exports_with_linears_pt2e_can_quantize(op):
    """torch.export: the cell is aten.linear (input projection once + one recurrence per step)."""
    import torch

    model, feeds = _rnn_model(op, direction="bidirectional", initial=True)
    assert_matches_ort(model, feeds, atol=1e-5, export=True)
    program = torch.export.export(torch_module(model, feeds), (torch.from_numpy(feeds["X"]),))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    linears = targets.count("aten.linear.default")
    per_step = 2 if op == "GRU" else 1  # GRU without linear_before_reset: r·h goes through its own linear
    assert linears == 2 * (1 + per_step * SEQ), targets
    assert not any("lstm" in t or "gru" in t for t in targets)


def test_a_sequence_longer_than_the_unroll_limit_is_refused_by_name():
    from onnx_torch.module import ConversionError
    from onnx_torch.ops.rnn import MAX_STEPS

    x = rand(RNG, MAX_STEPS + 1, 1, IN)
    inits = {"W": rand(RNG, 1, HID, IN), "R": rand(RNG, 1, HID, HID)}
    node = helper.make_node("RNN", ["X", "W", "R"], ["Y"], name="rnn_long", hidden_size=HID)
    model = make_model(node, {"X": x}, ["Y"], initializers=inits)
    with pytest.raises(ConversionError, match=f"rnn_long.*{MAX_STEPS + 1} steps"):
        torch_module(model, {"X": x})


def _targets(model, feeds) -> list[str]:
    import torch

    program = torch.export.export(torch_module(model, feeds), (torch.from_numpy(feeds["X"]),))
    return [str(n.target) for n in program.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("layout", [0, 1], ids=["layout=0", "layout=1"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_past_the_unroll_limit_an_lstm_or_gru_is_one_torch_op_that_matches_ort(monkeypatch, op, direction, layout):
    """Kept whole (torch.lstm / torch.gru: what torch.export writes for nn.LSTM / nn.GRU) the node
    computes what ORT does, every direction and layout; the limit is lowered to reach it at SEQ."""
    from onnx_torch.ops import rnn

    monkeypatch.setattr(rnn, "UNROLL_UP_TO_STEPS", 0)
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    model, feeds = _rnn_model(op, direction=direction, layout=layout, initial=True, **attrs)
    _check(model, feeds)
    targets = _targets(model, feeds)
    assert f"aten.{op.lower()}.input" in targets and "aten.linear.default" not in targets, targets


@pytest.mark.parametrize("case", ["GRU linear_before_reset=0", "LSTM peepholes", "LSTM clip", "LSTM input_forget"])
def test_variants_torch_has_no_op_for_still_unroll_past_the_limit(monkeypatch, case):
    from onnx_torch.ops import rnn

    monkeypatch.setattr(rnn, "UNROLL_UP_TO_STEPS", 0)
    op = case.split()[0]
    kw = {"LSTM peepholes": {"peepholes": True}, "LSTM clip": {"clip": 0.5},
          "LSTM input_forget": {"input_forget": 1}}.get(case, {})
    model, feeds = _rnn_model(op, **kw)
    assert_matches_ort(model, feeds, atol=1e-5)
    assert "aten.linear.default" in _targets(model, feeds)


def test_a_300_step_two_layer_lstm_converts_whole_and_matches_ort():
    """The brainmaze seizure model's shape of problem (2 stacked LSTMs over 300 steps): unrolled,
    its PT2E path was still exporting after 14 minutes; whole, it converts at once."""
    seq, hid = 300, 16
    x = rand(RNG, seq, 1, IN)
    inits = {"W1": rand(RNG, 1, 4 * hid, IN) * 0.5, "R1": rand(RNG, 1, 4 * hid, hid) * 0.5,
             "B1": rand(RNG, 1, 8 * hid) * 0.5, "W2": rand(RNG, 1, 4 * hid, hid) * 0.5,
             "R2": rand(RNG, 1, 4 * hid, hid) * 0.5}
    nodes = [helper.make_node("LSTM", ["X", "W1", "R1", "B1"], ["Y1"], name="lstm1", hidden_size=hid),
             helper.make_node("Squeeze", ["Y1", "one"], ["S1"], name="squeeze"),
             helper.make_node("LSTM", ["S1", "W2", "R2"], ["Y2"], name="lstm2", hidden_size=hid)]
    inits["one"] = np.array([1], np.int64)
    model = make_model(nodes, {"X": x}, ["Y2"], initializers=inits, opset=14)
    assert_matches_ort(model, {"X": x}, atol=1e-4, export=True)
    assert _targets(model, {"X": x}).count("aten.lstm.input") == 2
