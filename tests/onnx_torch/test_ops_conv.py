"""Conv / ConvTranspose converters against ORT: every auto_pad, groups, dilations, strides,
asymmetric pads, 1d/2d/3d; output_padding and output_shape for ConvTranspose."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from onnx_parity import assert_matches_ort, make_model, rand

RNG = np.random.default_rng(0)


def _conv_model(op, x_shape, w_shape, attrs, *, bias=True, opset=17):
    x = rand(RNG, *x_shape)
    w = rand(RNG, *w_shape)
    inits = {"W": w}
    names = ["X", "W"]
    if bias:
        out_ch = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
        inits["B"] = rand(RNG, out_ch)
        names.append("B")
    node = helper.make_node(op, names, ["Y"], name="n0", **attrs)
    return make_model(node, {"X": x}, ["Y"], initializers=inits, opset=opset), {"X": x}


CONV_CASES = {
    "2d default": ((1, 3, 7, 8), (4, 3, 3, 3), {}),
    "2d symmetric pads stride 2": ((1, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "2d asymmetric pads": ((1, 2, 6, 7), (3, 2, 3, 2), {"pads": [0, 1, 2, 0]}),
    "2d SAME_UPPER stride 2": ((1, 3, 8, 7), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "2d SAME_LOWER stride 2": ((1, 3, 8, 7), (4, 3, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    "2d SAME_UPPER even kernel": ((1, 2, 6, 6), (2, 2, 2, 4), {"auto_pad": "SAME_UPPER"}),
    "2d VALID": ((1, 3, 8, 7), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 1]}),
    "2d SAME_UPPER stride above kernel": ((1, 3, 5, 7), (4, 3, 1, 2), {"auto_pad": "SAME_UPPER", "strides": [3, 3]}),
    "2d depthwise": ((1, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "2d groups 2 dilation 2": ((1, 4, 9, 9), (6, 2, 3, 3), {"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "1d stride 2 asymmetric": ((2, 3, 11), (5, 3, 3), {"strides": [2], "pads": [2, 0]}),
    "1d SAME_UPPER": ((1, 3, 10), (2, 3, 4), {"auto_pad": "SAME_UPPER"}),
    "3d pads": ((1, 2, 4, 5, 5), (3, 2, 3, 3, 3), {"pads": [1, 0, 1, 1, 0, 1]}),
    "3d SAME_LOWER": ((1, 2, 4, 5, 5), (3, 2, 2, 3, 2), {"auto_pad": "SAME_LOWER", "strides": [1, 2, 2]}),
    "2d kernel_shape attribute": ((1, 3, 6, 6), (2, 3, 3, 3), {"kernel_shape": [3, 3]}),
}


@pytest.mark.parametrize("case", list(CONV_CASES), ids=list(CONV_CASES))
def test_conv_matches_ort(case):
    x_shape, w_shape, attrs = CONV_CASES[case]
    model, feeds = _conv_model("Conv", x_shape, w_shape, attrs)
    assert_matches_ort(model, feeds, atol=1e-4)


def test_ort_refuses_same_padding_with_dilation():
    """ORT's Conv kernel rejects auto_pad SAME_* with dilation > 1, so such a model never reaches
    conversion: the converter follows the ONNX spec (dilated kernel) there, untested against ORT."""
    import onnxruntime

    from onnx_parity import ort_outputs

    model, feeds = _conv_model("Conv", (1, 2, 9, 8), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "dilations": [2, 2]})
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument, match="Dilation not supported"):
        ort_outputs(model, feeds)


def test_conv_without_bias_at_opset_9():
    model, feeds = _conv_model("Conv", (1, 2, 5, 5), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]}, bias=False, opset=9)
    assert_matches_ort(model, feeds, atol=1e-4)


CONV_T_CASES = {
    "2d default": ((1, 3, 4, 5), (3, 2, 3, 3), {}),
    "2d stride 2 pads": ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "2d stride 2 output_padding": ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                               "output_padding": [1, 1]}),
    "2d asymmetric pads": ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 0]}),
    "2d groups 2 dilation 2": ((1, 4, 4, 4), (4, 2, 3, 3), {"group": 2, "dilations": [2, 2]}),
    "2d output_shape": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [8, 10]}),
    "2d output_shape odd total": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [7, 9]}),
    "2d output_shape SAME_UPPER": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [7, 10],
                                                               "auto_pad": "SAME_UPPER"}),
    "2d SAME_UPPER stride 2": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "2d SAME_LOWER stride 2": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    "2d VALID": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
    "2d stride 4 kernel 2 output_padding 2": ((1, 2, 3, 3), (2, 2, 2, 2), {"strides": [4, 4],
                                                                          "output_padding": [2, 2]}),
    "1d stride 2": ((1, 3, 6), (3, 2, 4), {"strides": [2], "pads": [1, 1]}),
    "3d stride 2 pads": ((1, 2, 3, 4, 3), (2, 2, 3, 3, 2), {"strides": [2, 2, 1], "pads": [1, 0, 0, 1, 1, 0]}),
}


@pytest.mark.parametrize("case", list(CONV_T_CASES), ids=list(CONV_T_CASES))
def test_conv_transpose_matches_ort(case):
    x_shape, w_shape, attrs = CONV_T_CASES[case]
    model, feeds = _conv_model("ConvTranspose", x_shape, w_shape, attrs)
    assert_matches_ort(model, feeds, atol=1e-4)


def test_conv_family_exports_to_plain_aten_convs():
    """torch.export of Conv(SAME_UPPER, asymmetric) -> ConvTranspose: aten.conv2d / conv_transpose2d
    with the bias inside the call (what the XNNPACK quantizer annotates), parity after export."""
    import torch

    x = rand(RNG, 1, 3, 8, 7)
    inits = {"W": rand(RNG, 4, 3, 3, 3), "B": rand(RNG, 4), "WT": rand(RNG, 4, 2, 3, 3), "BT": rand(RNG, 2)}
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["H"], name="c", auto_pad="SAME_UPPER", strides=[2, 2]),
             helper.make_node("ConvTranspose", ["H", "WT", "BT"], ["Y"], name="t", strides=[2, 2],
                              pads=[1, 0, 1, 0], output_padding=[1, 1])]
    model = make_model(nodes, {"X": x}, ["Y"], initializers=inits)
    assert_matches_ort(model, {"X": x}, atol=1e-4, export=True)
    from onnx_parity import torch_module

    program = torch.export.export(torch_module(model, {"X": x}), (torch.from_numpy(x),))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert "aten.conv2d.default" in targets and "aten.conv_transpose2d.input" in targets
    conv = next(n for n in program.graph.nodes if str(n.target) == "aten.conv2d.default")
    assert len(conv.args) >= 3 and conv.args[2] is not None, "bias must stay inside the conv call"
