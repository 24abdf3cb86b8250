"""ORT's MinMax calibrator's augmented graph, written by the linear-time shortcut, equals ORT's own
byte for byte (quantize/shortcuts/ort.py): graphs with shared readers, unread tensors (graph outputs), a
tensor typed only by a graph output, per-tensor and per-channel axes (attribute before opset 18,
input from 18), and a real detector from the corpus."""
from __future__ import annotations

import itertools
import uuid

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.quantize.shortcuts.ort import _augment_graph


def _branchy(opset: int):
    """conv -> relu feeding three readers, one of which is also an output; an Add of two tensors."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
             helper.make_node("Sigmoid", ["r"], ["s"], name="sig"),
             helper.make_node("Add", ["c2", "s"], ["a"], name="add"),
             helper.make_node("Mul", ["a", "r"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 4, 8, 8])], [w, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _augmented_bytes(path, tmp_path, monkeypatch, *, shortcut: bool, per_channel: bool) -> bytes:
    from onnxruntime.quantization.calibrate import MinMaxCalibrater

    counter = itertools.count()
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(counter)))  # ORT names initializers by uuid4
    out = tmp_path / f"aug_{shortcut}_{per_channel}.onnx"
    calibrator = MinMaxCalibrater(str(path), augmented_model_path=str(out), per_channel=per_channel)
    method = _augment_graph if shortcut else getattr(MinMaxCalibrater.augment_graph, "original",
                                                     MinMaxCalibrater.augment_graph)
    method(calibrator)
    return out.read_bytes()


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("opset", [17, 18])
def test_the_shortcut_writes_ort_s_augmented_graph(tmp_path, monkeypatch, opset, per_channel):
    path = tmp_path / "m.onnx"
    onnx.save(_branchy(opset), path)
    ours = _augmented_bytes(path, tmp_path, monkeypatch, shortcut=True, per_channel=per_channel)
    theirs = _augmented_bytes(path, tmp_path, monkeypatch, shortcut=False, per_channel=per_channel)
    assert ours == theirs
    added = [n.op_type for n in onnx.load_from_string(ours).graph.node if n.op_type.startswith("Reduce")]
    assert len(added) > 8  # it calibrated something: ReduceMin and ReduceMax per tensor


def test_the_shortcut_writes_ort_s_augmented_graph_of_a_real_detector(tmp_path, monkeypatch):
    from tests.realworld.corpus import wheel_file

    try:
        src = wheel_file("rapidocr-onnxruntime", "ch_PP-OCRv4_det_infer.onnx")(tmp_path)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"corpus wheel not installed: {e}")
    path = tmp_path / "det.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(onnx.load(str(src))), path)
    assert (_augmented_bytes(path, tmp_path, monkeypatch, shortcut=True, per_channel=False)
            == _augmented_bytes(path, tmp_path, monkeypatch, shortcut=False, per_channel=False))


def test_the_shortcut_is_in_place_when_ort_quantizes(tmp_path):
    from onnxruntime.quantization.calibrate import MinMaxCalibrater

    from service.pipeline.quantize.shortcuts.ort import install_minmax_augment_shortcut

    assert install_minmax_augment_shortcut()
    assert MinMaxCalibrater.augment_graph is _augment_graph
