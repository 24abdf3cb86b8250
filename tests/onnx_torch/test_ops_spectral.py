"""STFT and DFT converters against ORT's CPU kernels (the audio front-ends onnx-asr 0.12 ships:
Whisper/NeMo/Kaldi log-mel with STFT, WeSpeaker's frames with DFT), eager and through torch.export,
and PT2E quantizes the DFT as a linear layer."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from onnx_torch.ops._common import norm_axis

from onnx_parity import assert_matches_ort, make_model, rand

RNG = np.random.default_rng(17)


def _hann(n):
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


@pytest.mark.parametrize("signal_shape, window, length, onesided", [
    ((2, 400, 1), 64, None, 1),  # a window, real [batch, length, 1]
    ((1, 300), 50, None, 1),  # [batch, length]: ORT accepts a real signal without its last dim
    ((1, 256, 1), None, 32, 1),  # frame_length, no window (rectangular)
    ((1, 256, 1), 32, 32, 0),  # both sides
    ((1, 128, 2), 16, None, 0),  # complex signal
], ids=["window", "2-D signal", "frame_length only", "two-sided", "complex"])
def test_stft_matches_ort(signal_shape, window, length, onesided):
    x = rand(RNG, *signal_shape)
    inits = {"step": np.array(10, np.int64)}
    names = ["x", "step"]
    if window is not None:
        inits["win"] = _hann(window)
    names.append("win" if window is not None else "")
    if length is not None:
        inits["len"] = np.array(length, np.int64)
        names.append("len")
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    model = make_model(node, {"x": x}, ["y"], initializers=inits, opset=17)
    n = window or length
    assert_matches_ort(model, {"x": x}, atol=2e-6 * n * float(np.abs(x).max()), rtol=1e-4, export=True)


@pytest.mark.parametrize("opset, shape, attrs, axis_input, length", [
    (17, (2, 64, 1), {"axis": 1, "onesided": 1}, None, None),
    (17, (2, 5, 48, 1), {"axis": -2, "onesided": 1}, None, 64),  # zero-padded to dft_length (WeSpeaker's form)
    (17, (1, 32, 2), {"axis": 1}, None, None),  # complex, both sides
    (17, (1, 32, 2), {"axis": 1, "inverse": 1}, None, None),
    (17, (3, 40, 4, 1), {"axis": 1}, None, 32),  # truncated, transformed axis not last
    (20, (2, 6, 64, 1), {"onesided": 1}, -2, None),  # opset 20: axis is an input
], ids=["real onesided", "padded to dft_length", "complex", "inverse", "truncated, inner axis", "opset 20"])
def test_dft_matches_ort(opset, shape, attrs, axis_input, length):
    x = rand(RNG, *shape)
    inits, names = {}, ["x"]
    if length is not None:
        inits["n"] = np.array(length, np.int64)
    names.append("n" if length is not None else "")
    if axis_input is not None:
        inits["axis"] = np.array(axis_input, np.int64)
        names.append("axis")
    while names and names[-1] == "":
        names.pop()
    model = make_model(helper.make_node("DFT", names, ["y"], **attrs), {"x": x}, ["y"], initializers=inits, opset=opset)
    n = length or shape[norm_axis(axis_input if axis_input is not None else attrs["axis"], len(shape))]
    assert_matches_ort(model, {"x": x}, atol=2e-6 * n * float(np.abs(x).max()), rtol=1e-4, export=True)


def test_a_window_that_is_not_a_constant_is_named():
    from onnx_torch.module import ConversionError
    from onnx_parity import torch_module

    x, w = rand(RNG, 1, 64, 1), _hann(16)
    model = make_model(helper.make_node("STFT", ["x", "step", "w"], ["y"]), {"x": x, "w": w}, ["y"],
                       initializers={"step": np.array(4, np.int64)}, opset=17)
    with pytest.raises(ConversionError, match="STFT window that is not a constant"):
        torch_module(model, {"x": x, "w": w})


@pytest.mark.heavy
def test_pt2e_quantizes_the_dft_as_a_linear():
    from test_ops_pt2e import _quantized, _weights_dequantized

    x = rand(RNG, 1, 400, 1)
    model = make_model(helper.make_node("STFT", ["x", "step", "win"], ["y"]), {"x": x}, ["y"],
                       initializers={"step": np.array(160, np.int64), "win": _hann(64)}, opset=17)
    assert _weights_dequantized(_quantized(model, {"x": x}), "linear") == (1, 1)
