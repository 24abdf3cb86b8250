"""Resize (opsets 10-19 input forms), Upsample (7, 9) and Pad (every mode, attribute and input
forms, opset-18 axes) against ORT."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_parity import assert_matches_ort, make_model, rand, torch_module

RNG = np.random.default_rng(2)
EMPTY = np.array([], np.float32)


def _resize(x_shape, attrs, *, scales=None, sizes=None, roi=None, opset=13):
    x = rand(RNG, *x_shape)
    inits = {}
    if opset == 10:
        inits["scales"] = np.asarray(scales, np.float32)
        names = ["X", "scales"]
    else:
        names = ["X", "", "", ""]
        if roi is not None or opset < 13:
            inits["roi"] = np.asarray(roi if roi is not None else [], np.float32)
            names[1] = "roi"
        if scales is not None or opset < 13:
            inits["scales"] = np.asarray(scales if scales is not None else [], np.float32)
            names[2] = "scales"
        if sizes is not None:
            inits["sizes"] = np.asarray(sizes, np.int64)
            names[3] = "sizes"
        while names[-1] == "":
            names.pop()
    node = helper.make_node("Resize", names, ["Y"], name="r0", **attrs)
    return make_model(node, {"X": x}, ["Y"], initializers=inits, opset=opset), {"X": x}


NEAREST = {
    "asymmetric floor x2": ({"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
                            dict(scales=[1, 1, 2, 2])),
    "asymmetric floor x3 sizes": ({"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
                                  dict(sizes=[1, 2, 12, 15])),
    "half_pixel round_prefer_floor x2": ({}, dict(scales=[1, 1, 2, 2])),
    "half_pixel round_prefer_ceil 1.7": ({"nearest_mode": "round_prefer_ceil"}, dict(scales=[1, 1, 1.7, 1.7])),
    "half_pixel ceil downsample": ({"nearest_mode": "ceil"}, dict(scales=[1, 1, 0.6, 0.5])),
    "align_corners x2": ({"coordinate_transformation_mode": "align_corners"}, dict(scales=[1, 1, 2, 2])),
    "pytorch_half_pixel sizes": ({"coordinate_transformation_mode": "pytorch_half_pixel"},
                                 dict(sizes=[1, 2, 7, 1])),
    "tf_half_pixel_for_nn": ({"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
                             dict(scales=[1, 1, 1.5, 2.5])),
    "asymmetric round_prefer_floor x3 on dims 1-3": ({"coordinate_transformation_mode": "asymmetric"},
                                                     dict(scales=[1, 3, 3, 1])),
}

LINEAR = {
    "half_pixel x2": ({"mode": "linear"}, dict(scales=[1, 1, 2, 2])),
    "half_pixel sizes": ({"mode": "linear"}, dict(sizes=[1, 2, 9, 7])),
    "half_pixel scale 1.5 (not out/in)": ({"mode": "linear"}, dict(scales=[1, 1, 1.5, 1.3])),
    "half_pixel downsample": ({"mode": "linear"}, dict(scales=[1, 1, 0.5, 0.6])),
    "pytorch_half_pixel to length 1": ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
                                       dict(sizes=[1, 2, 1, 8])),
    "align_corners sizes": ({"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                            dict(sizes=[1, 2, 9, 11])),
    "asymmetric x2": ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, dict(scales=[1, 1, 2, 2])),
    "tf_crop_and_resize": ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                            "extrapolation_value": -7.0},
                           dict(sizes=[1, 2, 6, 6], roi=[0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3])),
}

CUBIC = {
    "half_pixel x2": ({"mode": "cubic"}, dict(scales=[1, 1, 2, 2])),
    "half_pixel a=-0.5 exclude_outside": ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
                                          dict(scales=[1, 1, 1.6, 2.2])),
    "align_corners sizes": ({"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
                            dict(sizes=[1, 2, 8, 9])),
    "asymmetric downsample": ({"mode": "cubic", "coordinate_transformation_mode": "asymmetric"},
                              dict(scales=[1, 1, 0.5, 0.75])),
}


def _cases(table):
    return [pytest.param(k, id=k) for k in table]


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("case", _cases(NEAREST))
def test_resize_nearest_matches_ort(case, opset):
    attrs, inputs = NEAREST[case]
    assert_matches_ort(*_resize((1, 2, 4, 5), attrs, opset=opset, **inputs))


@pytest.mark.parametrize("opset", [11, 13, 19])
@pytest.mark.parametrize("case", _cases(LINEAR))
def test_resize_linear_matches_ort(case, opset):
    attrs, inputs = LINEAR[case]
    assert_matches_ort(*_resize((1, 2, 4, 5), attrs, opset=opset, **inputs), atol=1e-5)


@pytest.mark.parametrize("case", _cases(CUBIC))
def test_resize_cubic_matches_ort(case):
    attrs, inputs = CUBIC[case]
    assert_matches_ort(*_resize((1, 2, 5, 6), attrs, **inputs), atol=1e-5, export=True)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 1.5, 3], [1, 1, 0.5, 0.8]], ids=["x2", "x1.5x3", "down"])
def test_resize_opset_10_is_asymmetric_with_the_legacy_nearest_rule(mode, scales):
    assert_matches_ort(*_resize((1, 2, 4, 5), {"mode": mode}, scales=scales, opset=10))


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_opset_18_axes_and_keep_aspect_ratio(policy):
    attrs = {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": policy}
    assert_matches_ort(*_resize((1, 2, 4, 5), attrs, sizes=[7, 13], opset=18), atol=1e-5)


def test_resize_opset_18_scales_on_axes():
    assert_matches_ort(*_resize((1, 2, 4, 5), {"axes": [3, 2]}, scales=[2.0, 3.0], opset=18))


def test_resize_half_pixel_symmetric_opset_19():
    attrs = {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}
    assert_matches_ort(*_resize((1, 2, 4, 5), attrs, scales=[1, 1, 1.7, 2.3], opset=19), atol=1e-5)


def test_resize_1d_and_5d_linear():
    assert_matches_ort(*_resize((1, 2, 6), {"mode": "linear"}, scales=[1, 1, 2.5]), atol=1e-5)
    assert_matches_ort(*_resize((1, 1, 3, 4, 4), {"mode": "linear"}, scales=[1, 1, 2, 2, 2]), atol=1e-5)


def test_resize_with_a_runtime_scale_is_refused_by_name():
    import torch

    from onnx_torch.module import ConversionError

    x = rand(RNG, 1, 2, 4, 5)
    node = helper.make_node("Resize", ["X", "", "S"], ["Y"], name="r_dyn")
    model = make_model(node, {"X": x, "S": np.array([1, 1, 2, 2], np.float32)}, ["Y"])
    with pytest.raises(ConversionError, match="r_dyn.*not a constant"):
        torch_module(model, {"X": x, "S": np.array([1, 1, 2, 2], np.float32)})
    del torch


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_matches_ort(opset, mode):
    x = rand(RNG, 1, 2, 3, 4)
    scales = np.array([1, 1, 2, 3], np.float32)
    if opset == 7:
        node = helper.make_node("Upsample", ["X"], ["Y"], mode=mode, scales=scales.tolist())
        model = make_model(node, {"X": x}, ["Y"], opset=7)
    else:
        node = helper.make_node("Upsample", ["X", "scales"], ["Y"], mode=mode)
        model = make_model(node, {"X": x}, ["Y"], initializers={"scales": scales}, opset=9)
    assert_matches_ort(model, {"X": x})


def test_resize_exports_to_aten_upsample_ops():
    import torch

    x = rand(RNG, 1, 2, 4, 5)
    nodes = [helper.make_node("Resize", ["X", "", "s2"], ["A"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Resize", ["A", "", "", "size"], ["Y"], mode="linear")]
    model = make_model(nodes, {"X": x}, ["Y"], initializers={"s2": np.array([1, 1, 2, 2], np.float32),
                                                             "size": np.array([1, 2, 11, 13], np.int64)})
    assert_matches_ort(model, {"X": x}, atol=1e-5, export=True)
    program = torch.export.export(torch_module(model, {"X": x}), (torch.from_numpy(x),))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert any("upsample_nearest2d" in t for t in targets), targets
    assert any("upsample_bilinear2d" in t for t in targets), targets


# ----------------------------------------------------------------------------- Pad
PADS = {
    "spatial": [0, 0, 1, 2, 0, 0, 2, 1],
    "all axes": [1, 1, 0, 2, 0, 2, 1, 0],
    "negative crops": [0, 0, -1, 2, 0, 0, 1, -2],
}


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", list(PADS), ids=list(PADS))
def test_pad_attribute_form_opset_2(mode, pads):
    x = rand(RNG, 2, 3, 4, 5)
    node = helper.make_node("Pad", ["X"], ["Y"], mode=mode, pads=PADS[pads], value=1.5)
    assert_matches_ort(make_model(node, {"X": x}, ["Y"], opset=10), {"X": x})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", list(PADS), ids=list(PADS))
def test_pad_input_form_opset_19(mode, pads):
    x = rand(RNG, 2, 3, 4, 5)
    inits = {"pads": np.array(PADS[pads], np.int64), "value": np.array(-2.5, np.float32)}
    node = helper.make_node("Pad", ["X", "pads", "value"], ["Y"], mode=mode)
    assert_matches_ort(make_model(node, {"X": x}, ["Y"], initializers=inits, opset=19), {"X": x})


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad_opset_18_axes_input(mode):
    x = rand(RNG, 2, 3, 4, 5)
    inits = {"pads": np.array([1, 2, 3, 1], np.int64), "axes": np.array([-1, 1], np.int64)}
    node = helper.make_node("Pad", ["X", "pads", "", "axes"], ["Y"], mode=mode)
    assert_matches_ort(make_model(node, {"X": x}, ["Y"], initializers=inits, opset=18), {"X": x})


def test_pad_int64_input_constant_value():
    x = RNG.integers(-5, 5, (2, 3)).astype(np.int64)
    inits = {"pads": np.array([1, 0, 0, 2], np.int64), "value": np.array(9, np.int64)}
    node = helper.make_node("Pad", ["X", "pads", "value"], ["Y"])
    model = make_model(node, {"X": x}, ["Y"], initializers=inits, opset=13, output_types={"Y": TensorProto.INT64})
    assert_matches_ort(model, {"X": x})


def test_pad_value_from_a_graph_input():
    x = rand(RNG, 1, 2, 3)
    v = np.array(3.25, np.float32)
    node = helper.make_node("Pad", ["X", "pads", "V"], ["Y"])
    model = make_model(node, {"X": x, "V": v}, ["Y"], initializers={"pads": np.array([0, 1, 1, 0, 0, 2], np.int64)},
                       opset=13)
    assert_matches_ort(model, {"X": x, "V": v}, export=True)


def test_pad_modes_export():
    import torch

    x = rand(RNG, 1, 2, 4, 5)
    inits = {"p1": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p2": np.array([0, 0, 2, 0, 0, 0, 0, 2], np.int64)}
    nodes = [helper.make_node("Pad", ["X", "p1"], ["A"], mode="reflect"),
             helper.make_node("Pad", ["A", "p2"], ["Y"], mode="constant")]
    model = make_model(nodes, {"X": x}, ["Y"], initializers=inits, opset=13)
    assert_matches_ort(model, {"X": x}, export=True)
    program = torch.export.export(torch_module(model, {"X": x}), (torch.from_numpy(x),))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"aten.constant_pad_nd.default", "aten.pad.default"} & targets, targets


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_a_long_axis_pad_is_one_pad_in_the_exported_file_not_a_table_as_long_as_the_axis(mode):
    """30 s of 16 kHz audio reflect-padded for an STFT (Whisper's front end): as a per-axis index it
    was a 480 400-element int64 constant, 3.8 MB of a 3.9 MB PT2E file. torch's reflection and
    replication pads compute the same values, and torch.onnx writes them back as one Pad."""
    import torch

    x = rand(RNG, 1, 2, 6000)
    inits = {"pads": np.array([0, 0, 200, 0, 0, 300], np.int64)}
    node = helper.make_node("Pad", ["X", "pads"], ["Y"], mode=mode)
    model = make_model(node, {"X": x}, ["Y"], initializers=inits, opset=13)
    assert_matches_ort(model, {"X": x}, export=True)
    module = torch_module(model, {"X": x})
    exported = torch.onnx.export(module, (torch.from_numpy(x),), dynamo=True, verbose=False).model_proto
    assert [n.op_type for n in exported.graph.node] == ["Pad"]
    assert max((int(np.prod(t.dims)) for t in exported.graph.initializer), default=0) < 100


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_a_pad_torch_cannot_express_keeps_the_index_form(mode):
    """An axis before the last two of a rank-3 tensor: aten's reflection/replication pads do not reach
    it, so it stays an index_select (ORT refuses a reflect pad as long as its axis, so that case
    never reaches the converter's choice)."""
    import torch

    x = rand(RNG, 2, 3, 5)
    node = helper.make_node("Pad", ["X", "pads"], ["Y"], mode=mode)
    model = make_model(node, {"X": x}, ["Y"], initializers={"pads": np.array([1, 0, 0, 1, 0, 0], np.int64)},
                       opset=13)
    assert_matches_ort(model, {"X": x}, export=True)
    program = torch.export.export(torch_module(model, {"X": x}), (torch.from_numpy(x),))
    assert "aten.index_select.default" in {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


ANTIALIAS = {
    "linear down": ({"mode": "linear"}, dict(scales=[1, 1, 0.5, 0.6])),
    "linear down sizes": ({"mode": "linear"}, dict(sizes=[1, 2, 3, 4])),
    "linear up": ({"mode": "linear"}, dict(scales=[1, 1, 1.5, 2.0])),
    "linear down exclude_outside": ({"mode": "linear", "exclude_outside": 1}, dict(scales=[1, 1, 0.4, 0.7])),
    "cubic down": ({"mode": "cubic"}, dict(scales=[1, 1, 0.5, 0.6])),
    "cubic down a=-0.5 exclude_outside": ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
                                          dict(scales=[1, 1, 0.45, 0.8])),
    "linear down align_corners": ({"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                                  dict(scales=[1, 1, 0.5, 0.6])),
}


@pytest.mark.parametrize("case", _cases(ANTIALIAS))
def test_resize_antialias_opset_18(case):
    attrs, inputs = ANTIALIAS[case]
    assert_matches_ort(*_resize((1, 2, 9, 11), {**attrs, "antialias": 1}, opset=18, **inputs), atol=1e-5,
                       export=True)


def test_resize_nearest_on_uint8_images_and_linear_refused():
    from onnx_torch.module import ConversionError

    x = RNG.integers(0, 255, (1, 3, 4, 5)).astype(np.uint8)
    inits = {"s": np.array([1, 1, 2, 1.5], np.float32)}
    node = helper.make_node("Resize", ["X", "", "s"], ["Y"], name="r_u8", mode="nearest")
    model = make_model(node, {"X": x}, ["Y"], initializers=inits, output_types={"Y": TensorProto.UINT8})
    assert_matches_ort(model, {"X": x})
    node = helper.make_node("Resize", ["X", "", "s"], ["Y"], name="r_u8", mode="linear")
    model = make_model(node, {"X": x}, ["Y"], initializers=inits, output_types={"Y": TensorProto.UINT8})
    with pytest.raises(ConversionError, match="r_u8.*linear on torch.uint8"):
        torch_module(model, {"X": x})


KEEPS_SIZES = {
    "linear pytorch_half_pixel 1.3 on 3x1": ((1, 2, 3, 1), {"mode": "linear",
                                                           "coordinate_transformation_mode": "pytorch_half_pixel"},
                                            dict(scales=[1, 1, 1.3, 1.3])),
    "nearest tf_crop_and_resize ceil": ((1, 2, 3), {"coordinate_transformation_mode": "tf_crop_and_resize",
                                                    "nearest_mode": "ceil"},
                                        dict(scales=[1, 1, 1.3], roi=[0, 0, 0.22, 1, 1, 0.66])),
}


@pytest.mark.parametrize("case", _cases(KEEPS_SIZES))
def test_resize_that_keeps_every_size_is_a_copy_in_ort(case):
    shape, attrs, inputs = KEEPS_SIZES[case]
    model, feeds = _resize(shape, attrs, **inputs)
    assert_matches_ort(model, feeds)
    np.testing.assert_array_equal(assert_matches_ort(model, feeds)[0], feeds["X"])


def test_resize_one_dim_kept_with_a_scale_other_than_1_is_still_resampled():
    """Only the all-sizes-equal case is a copy: a kept dim with scale 1.3 beside a resized one is
    resampled with that scale."""
    model, feeds = _resize((1, 2, 3, 4), {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
                           scales=[1, 1, 1.3, 2])
    got = assert_matches_ort(model, feeds, atol=1e-5)[0]
    assert got.shape == (1, 2, 3, 8)


def _exact_vs_float32_pairs():
    """(in, out, coord, nearest_mode) where the exact ratio and float32 division pick different inputs."""
    pairs = []
    for coord in ("asymmetric", "half_pixel", "pytorch_half_pixel"):
        for nm in ("round_prefer_ceil", "floor", "ceil"):
            for i in range(2, 14):
                for o in range(2, 14):
                    s = np.float32(o) / np.float32(i)
                    x32, x64 = np.arange(o, dtype=np.float32), np.arange(o, dtype=np.float64)
                    h32, h64 = (0, 0) if coord == "asymmetric" else (np.float32(0.5), 0.5)
                    f = (x32 + h32) / s - h32
                    e = ((x64 + h64) * i / o - h64).astype(np.float32)
                    r = {"floor": np.floor, "ceil": np.ceil,
                         "round_prefer_ceil": lambda v: np.floor(v.astype(np.float64) + 0.5)}[nm]
                    if not np.array_equal(np.clip(r(f), 0, i - 1), np.clip(r(e), 0, i - 1)):
                        pairs.append((i, o, coord, nm))
    return pairs


@pytest.mark.parametrize("size_in,size_out,coord,nearest_mode", _exact_vs_float32_pairs())
def test_resize_from_sizes_rounding_of_the_original_coordinate(size_in, size_out, coord, nearest_mode):
    """Nearest from sizes where exact in/out and float32 division disagree: ORT uses the exact ratio
    for asymmetric (7 -> 4: output 2 reads input 4, 2 * 7/4 = 3.5 rounding up), float32 otherwise."""
    x = np.arange(size_in, dtype=np.float32).reshape(1, 1, size_in)
    model, _ = _resize(x.shape, {"coordinate_transformation_mode": coord, "nearest_mode": nearest_mode},
                       sizes=[1, 1, size_out])
    got = assert_matches_ort(model, {"X": x})[0].ravel()
    if (size_in, size_out, coord, nearest_mode) == (7, 4, "asymmetric", "round_prefer_ceil"):
        assert got.tolist() == [0, 2, 4, 5]


def test_resize_antialias_copies_an_axis_whose_size_does_not_change():
    attrs = {"mode": "cubic", "coordinate_transformation_mode": "half_pixel_symmetric", "exclude_outside": 1,
             "antialias": 1}
    assert_matches_ort(*_resize((1, 2, 2, 2), attrs, scales=[1, 1, 0.75, 1.3], opset=19), atol=1e-5)


@pytest.mark.parametrize("pads", [[-2, 3], [3, -2]], ids=["crop 2 pad 3", "pad 3 crop 2"])
def test_pad_constant_cropping_more_than_the_axis_holds(pads):
    """Size 1, pads that cut past the axis: ORT fills the output with the value; aten's
    constant_pad_nd refuses, so this goes through index + mask."""
    x = rand(RNG, 2, 1)
    inits = {"pads": np.array([0] + pads[:1] + [0] + pads[1:], np.int64), "value": np.array(4.5, np.float32)}
    node = helper.make_node("Pad", ["X", "pads", "value"], ["Y"])
    model = make_model(node, {"X": x}, ["Y"], initializers=inits, opset=13)
    assert_matches_ort(model, {"X": x}, export=True)
