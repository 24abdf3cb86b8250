"""The converted conv / pool / resize / RNN graphs are what PT2E's XNNPACK quantizer quantizes:
after prepare/calibrate/convert, every conv and linear weight is quantized (a dequantize feeds it).
Marked heavy: prepare_pt2e on an unrolled recurrence takes tens of seconds on the shared machine."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from onnx_parity import make_model, rand, torch_module
from test_ops_rnn import _rnn_model

RNG = np.random.default_rng(5)


def _quantized(model, feeds):
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    args = tuple(torch.from_numpy(a) for a in feeds.values())
    program = torch.export.export(torch_module(model, feeds), args)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(program.module(), quantizer)
    with torch.no_grad():
        prepared(*args)
    return convert_pt2e(prepared)


def _weights_dequantized(gm, op: str) -> tuple[int, int]:
    """(ops named op, those whose weight input comes out of a dequantize)."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and op in str(n.target)]
    quantized = [n for n in nodes if "dequantize" in str(getattr(n.args[1], "target", ""))]
    return len(nodes), len(quantized)


@pytest.mark.heavy
def test_conv_pool_resize_chain_is_quantized_by_pt2e():
    x = rand(RNG, 1, 3, 8, 8)
    inits = {"W": rand(RNG, 4, 3, 3, 3), "B": rand(RNG, 4), "W2": rand(RNG, 4, 4, 3, 3),
             "s": np.array([1, 1, 2, 2], np.float32)}
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["a"], auto_pad="SAME_UPPER", strides=[2, 2]),
             helper.make_node("MaxPool", ["a"], ["b"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Resize", ["b", "", "s"], ["c"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Conv", ["c", "W2"], ["Y"], pads=[1, 1, 1, 1])]
    gm = _quantized(make_model(nodes, {"X": x}, ["Y"], initializers=inits), {"X": x})
    assert _weights_dequantized(gm, "conv2d") == (2, 2)


@pytest.mark.heavy
def test_gru_linears_are_quantized_by_pt2e():
    model, feeds = _rnn_model("GRU", direction="reverse", initial=True)
    total, quantized = _weights_dequantized(_quantized(model, feeds), "linear")
    assert total > 0 and quantized == total
