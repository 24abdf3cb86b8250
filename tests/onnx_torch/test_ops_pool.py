"""Pooling converters against ORT: MaxPool / AveragePool / LpPool with ceil_mode, auto_pad,
asymmetric pads, dilations, count_include_pad; the Global forms; MaxPool's Indices output."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_parity import assert_matches_ort, make_model, rand

RNG = np.random.default_rng(1)


def _pool(op, x_shape, attrs, *, opset=17, outputs=("Y",), dtype=np.float32):
    x = rand(RNG, *x_shape).astype(dtype)
    node = helper.make_node(op, ["X"], list(outputs), name="p0", **attrs)
    types = {"I": TensorProto.INT64}
    if dtype != np.float32:
        types["Y"] = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return make_model(node, {"X": x}, list(outputs), opset=opset, output_types=types), {"X": x}


WINDOW_CASES = {
    "k3 s2": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "k3 s2 pads 1": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "k2 s2 ceil": ((1, 2, 7, 9), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "k3 s2 pads 1 ceil": ((1, 2, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                         "ceil_mode": 1}),
    "k3 s3 pads 1 ceil window in the right pad": ((1, 1, 7, 7), {"kernel_shape": [3, 3], "strides": [3, 3],
                                                                 "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "asymmetric pads": ((1, 2, 6, 7), {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0]}),
    "SAME_UPPER s2": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "SAME_LOWER s2": ((1, 2, 7, 8), {"kernel_shape": [2, 4], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    "VALID": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "VALID"}),
    "1d k3 s2 pads": ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
    "3d k2 s2 ceil": ((1, 2, 5, 5, 5), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2], "ceil_mode": 1}),
}


@pytest.mark.parametrize("case", list(WINDOW_CASES), ids=list(WINDOW_CASES))
def test_max_pool_matches_ort(case):
    shape, attrs = WINDOW_CASES[case]
    assert_matches_ort(*_pool("MaxPool", shape, attrs))


@pytest.mark.parametrize("include_pad", [0, 1], ids=["count_include_pad=0", "count_include_pad=1"])
@pytest.mark.parametrize("opset", [11, 19])
@pytest.mark.parametrize("case", list(WINDOW_CASES), ids=list(WINDOW_CASES))
def test_average_pool_matches_ort(case, opset, include_pad):
    shape, attrs = WINDOW_CASES[case]
    assert_matches_ort(*_pool("AveragePool", shape, {**attrs, "count_include_pad": include_pad}, opset=opset))


CEIL_DROPS = {
    "1d k1 s3 d2 no pads": ((1, 2, 9), {"kernel_shape": [1], "strides": [3], "dilations": [2]}),
    "1d k3 s2 pads 1,2": ((1, 2, 5), {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
    "1d k2 s3 pads 0,1": ((1, 2, 9), {"kernel_shape": [2], "strides": [3], "pads": [0, 1]}),
    "2d k2x1 s3 pads": ((1, 2, 9, 8), {"kernel_shape": [2, 1], "strides": [3, 3], "pads": [1, 0, 1, 0]}),
}


@pytest.mark.parametrize("op,opset", [("MaxPool", 12), ("MaxPool", 19), ("AveragePool", 11), ("AveragePool", 19)])
@pytest.mark.parametrize("case", list(CEIL_DROPS), ids=list(CEIL_DROPS))
def test_ceil_mode_drops_a_window_starting_in_the_end_padding(case, op, opset):
    """ceil((size + pads - k_eff) / s) + 1 windows, minus a last one starting at or past
    size + pad_begin: what ORT 1.32 computes (found by fuzzing against it)."""
    shape, attrs = CEIL_DROPS[case]
    if op == "AveragePool" and opset < 19:
        attrs = {k: v for k, v in attrs.items() if k != "dilations"}
    want = assert_matches_ort(*_pool(op, shape, {**attrs, "ceil_mode": 1}, opset=opset))
    size, k, s = shape[-1], attrs["kernel_shape"][-1], attrs["strides"][-1]
    d = attrs.get("dilations", [1])[-1]
    pads = attrs.get("pads", [0, 0])
    begin, total = pads[len(pads) // 2 - 1], pads[len(pads) // 2 - 1] + pads[-1]
    formula = -(-(size + total - d * (k - 1) - 1) // s) + 1
    assert want[0].shape[-1] == formula - 1  # the rule removed exactly one window here


@pytest.mark.parametrize("shape", [(1, 2, 3, 5), (1, 2, 3, 7)])
def test_lp_pool_kernel_longer_than_the_input_still_gives_a_window(shape):
    """ORT's LpPool: (3 - 4) / 2 + 1 in C++ integers is 1 window (clipped), where the other pools' float
    formula gives 0."""
    attrs = {"auto_pad": "VALID", "kernel_shape": [4, 4], "p": 2, "strides": [2, 1]}
    assert assert_matches_ort(*_pool("LpPool", shape, attrs, opset=18))[0].shape[2] == 1


def test_same_padding_with_stride_above_kernel():
    """SAME padding is negative when the stride exceeds the kernel: ORT's MaxPool (and AveragePool
    before opset 19) refuse it ("padding values must be non-negative"); AveragePool-19 runs it."""
    import onnxruntime

    from onnx_parity import ort_outputs

    attrs = {"kernel_shape": [1, 2], "strides": [3, 3], "auto_pad": "SAME_LOWER"}
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException, match="non-negative"):
        ort_outputs(*_pool("MaxPool", (1, 2, 5, 7), attrs))
    assert_matches_ort(*_pool("AveragePool", (1, 2, 5, 7), attrs, opset=19))


@pytest.mark.parametrize("opset,include_pad", [(12, 1), (19, 0), (19, 1)])
def test_average_pool_same_upper_with_negative_padding_shifts_windows_as_ort(opset, include_pad):
    """SAME_UPPER, size 9, kernel 1, stride 3: ORT's pad_needed is -2, so pad_head = -1 and every
    window starts one position later (1, 4, 7), a crop rather than a pad. (ORT refuses opset < 19
    with count_include_pad=0: "padding values must be non-negative".)"""
    attrs = {"kernel_shape": [2, 1, 1], "strides": [2, 2, 3], "auto_pad": "SAME_UPPER", "ceil_mode": 1,
             "count_include_pad": include_pad}
    assert_matches_ort(*_pool("AveragePool", (1, 2, 9, 5, 9), attrs, opset=opset))


@pytest.mark.parametrize("case", ["k3 s2 pads 1", "asymmetric pads", "SAME_UPPER s2", "1d k3 s2 pads"])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_ort(case, p):
    shape, attrs = WINDOW_CASES[case]
    assert_matches_ort(*_pool("LpPool", shape, {**attrs, "p": p}, opset=18), atol=1e-4)


DILATED = {
    "max dilation 2": ("MaxPool", {"kernel_shape": [3, 3], "dilations": [2, 2]}),
    "max dilation 2 pads ceil": ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2],
                                             "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "avg dilation 2 pads": ("AveragePool", {"kernel_shape": [3, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    "avg dilation 2 include pad ceil": ("AveragePool", {"kernel_shape": [2, 2], "dilations": [2, 2],
                                                        "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
                                                        "count_include_pad": 1}),
}


@pytest.mark.parametrize("case", list(DILATED), ids=list(DILATED))
def test_dilated_pools_match_ort(case):
    op, attrs = DILATED[case]
    assert_matches_ort(*_pool(op, (1, 2, 9, 10), attrs, opset=19))


INDICES = {
    "symmetric pads": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    "asymmetric pads": {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0]},
    "SAME_UPPER ceil": {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER", "ceil_mode": 1},
    "dilation 2": {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 0, 1]},
}


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("case", list(INDICES), ids=list(INDICES))
def test_max_pool_indices_match_ort(case, storage_order):
    model, feeds = _pool("MaxPool", (2, 3, 6, 7), {**INDICES[case], "storage_order": storage_order},
                         outputs=("Y", "I"), opset=12)
    assert_matches_ort(model, feeds)


def test_max_pool_1d_and_3d_indices_match_ort():
    assert_matches_ort(*_pool("MaxPool", (2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [0, 2]},
                              outputs=("Y", "I"), opset=12))
    assert_matches_ort(*_pool("MaxPool", (1, 2, 4, 5, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]},
                              outputs=("Y", "I"), opset=12))


def test_max_pool_on_int8_pads_with_the_dtype_lowest():
    assert_matches_ort(*_pool("MaxPool", (1, 2, 6, 6), {"kernel_shape": [3, 3], "pads": [0, 0, 2, 2]},
                              dtype=np.int8, opset=12))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 3, 4, 5), (1, 2, 3, 4, 2)], ids=["1d", "2d", "3d"])
def test_global_pools_match_ort(op, shape):
    assert_matches_ort(*_pool(op, shape, {}), atol=1e-5)


def test_pools_export_to_aten_pooling_ops():
    """torch.export of native and explicit routes: max_pool2d, avg_pool2d, adaptive_avg_pool2d."""
    import torch

    from onnx_parity import torch_module

    x = rand(RNG, 1, 2, 9, 9)
    nodes = [helper.make_node("MaxPool", ["X"], ["A"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["A"], ["B"], kernel_shape=[2, 2], auto_pad="SAME_UPPER",
                              ceil_mode=1),
             helper.make_node("GlobalAveragePool", ["B"], ["Y"])]
    model = make_model(nodes, {"X": x}, ["Y"])
    assert_matches_ort(model, {"X": x}, export=True)
    program = torch.export.export(torch_module(model, {"X": x}), (torch.from_numpy(x),))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"aten.max_pool2d.default", "aten.adaptive_avg_pool2d.default"} <= targets
