"""ORT's MinMax calibrator's augmented graph, written by the linear-time shortcut, equals ORT's own
byte for byte (quantize/toolchain_patches/ort.py): graphs with shared readers, unread tensors (graph outputs), a
tensor typed only by a graph output, per-tensor and per-channel axes (attribute before opset 18,
input from 18), and a real detector from the corpus."""
from __future__ import annotations

import itertools
import uuid

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.quantize.toolchain_patches.ort import _augment_graph


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

    from service.pipeline.quantize.toolchain_patches.ort import install_minmax_augment_shortcut

    assert install_minmax_augment_shortcut()
    assert MinMaxCalibrater.augment_graph is _augment_graph


# -- quantize_static's per-tensor scans (install_quantizer_shortcuts) ------------------------------

def _quantizer_graph():
    """What the replaced scans see: Conv+Relu and Clip (adjust_tensor_ranges), a Softmax, a tensor read
    twice by one node (the reader count), a weight shared by two Convs, and quantized graph outputs
    (QDQ renames their producers: replace_output_of_all_nodes)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32) * 0.3, "w2")
    lo, hi = (numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((0.0, "lo"), (6.0, "hi")))
    mm = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "mm")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["k"], name="clip"),
             helper.make_node("Conv", ["k", "w2"], ["c3"], name="conv3_shared_weight"),
             helper.make_node("Add", ["c3", "c3"], ["a"], name="add_twice"),
             helper.make_node("MatMul", ["a", "mm"], ["m"], name="matmul"),
             helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [w, w2, lo, hi, mm])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _quantized_bytes(path, tmp_path, monkeypatch, *, shortcuts: bool, fmt: str, per_channel: bool) -> bytes:
    import importlib

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from service.pipeline.quantize.toolchain_patches.ort import _QUANTIZER_SHORTCUTS, install_quantizer_shortcuts

    assert install_quantizer_shortcuts()
    if not shortcuts:  # ORT's own functions back, for this call only
        for module, holder, attr, _ in _QUANTIZER_SHORTCUTS:
            owner = importlib.import_module(f"onnxruntime.quantization.{module}")
            owner = getattr(owner, holder) if holder else owner
            monkeypatch.setattr(owner, attr, getattr(owner, attr).original)
    counter = itertools.count()
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(counter)))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)}
                               for i in range(3)])

        def get_next(self):
            return next(self.feeds, None)

    out = tmp_path / f"q_{shortcuts}_{fmt}_{per_channel}.onnx"
    quantize_static(str(path), str(out), Reader(), per_channel=per_channel,
                    quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator)
    monkeypatch.undo()
    return out.read_bytes()


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_the_quantizer_shortcuts_write_ort_s_file(tmp_path, monkeypatch, fmt, per_channel):
    path = tmp_path / "m.onnx"
    onnx.save(_quantizer_graph(), path)
    ours = _quantized_bytes(path, tmp_path, monkeypatch, shortcuts=True, fmt=fmt, per_channel=per_channel)
    theirs = _quantized_bytes(path, tmp_path, monkeypatch, shortcuts=False, fmt=fmt, per_channel=per_channel)
    assert ours == theirs
    ops = [n.op_type for n in onnx.load_from_string(ours).graph.node]
    assert ("QuantizeLinear" in ops) if fmt == "qdq" else ("QLinearConv" in ops)  # it quantized something


def test_the_quantizer_shortcuts_are_in_place_when_ort_quantizes():
    from onnxruntime.quantization import base_quantizer, onnx_model, qdq_quantizer

    from service.pipeline.quantize.toolchain_patches import ort as shortcuts

    assert shortcuts.install_quantizer_shortcuts()
    assert onnx_model.ONNXModel.replace_input_of_all_nodes is shortcuts._replace_input_of_all_nodes
    assert qdq_quantizer.find_by_name is shortcuts._find_by_name
    assert base_quantizer.BaseQuantizer.adjust_tensor_ranges is shortcuts._adjust_tensor_ranges


def test_a_tensor_no_node_reads_has_no_reader_count_as_in_ort():
    """``input_name_to_nodes()[name]`` raises KeyError for a tensor nothing reads; the count does too."""
    from onnxruntime.quantization.onnx_model import ONNXModel

    from service.pipeline.quantize.toolchain_patches.ort import _readers

    model = ONNXModel(_quantizer_graph())
    assert _readers(model, "c3") == len(model.input_name_to_nodes()["c3"]) == 2
    with pytest.raises(KeyError):
        model.input_name_to_nodes()["y"]
    with pytest.raises(KeyError):
        _readers(model, "y")
