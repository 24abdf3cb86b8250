"""ORT's calibrator run with the weights left on disk gives ORT's own ranges, and holds the weights once.

The oracle is ``quantize_static`` calibrating the same file itself (no cache): the cache our run
writes equals the one ORT's own calibration writes, for each calibration method, and the quantized
files are byte-identical.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from service.schemas.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.quantize.ort_quant import quantized_by_ort
from tests.pipeline.quantize.test_pre_process_external import _conv_bn_matmul

FEEDS = [{"x": np.random.default_rng(i).standard_normal((2, 3, 8, 8)).astype(np.float32)} for i in range(4)]


def _with_ops_ort_does_not_quantize(path):
    """Conv -> Sin -> Cos -> Reshape -> MatMul, every initializer external: the Sin -> Cos tensor is
    touched by no op ORT quantizes, so ORT's calibrator (which gets quantize_static's op list) skips it."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((16 * 8 * 8, 10)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Sin", ["c"], ["s"], name="sin"), helper.make_node("Cos", ["s"], ["k"], name="cos"),
             helper.make_node("Reshape", ["k", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=path.name + ".data", size_threshold=0)
    return path


def _quantized(model, out, method, *, lean: bool):
    settings = {**resolved_ort_settings(ComparisonOptions()), "calibrate_method": method}
    cache = out.with_suffix(".ranges.json")
    if not lean:
        # ORT calibrates inside quantize_static (the cache is only written, after its own calibration)
        import onnxruntime.quantization as q

        kwargs = dict(quant_format=q.QuantFormat.QDQ, per_channel=settings["per_channel"],
                      reduce_range=settings["reduce_range"], activation_type=q.QuantType.QInt8,
                      weight_type=q.QuantType.QInt8, extra_options=dict(settings["extra_options"]),
                      calibrate_method=getattr(q.CalibrationMethod, {"minmax": "MinMax", "entropy": "Entropy",
                                                                     "percentile": "Percentile"}[method]),
                      calibration_cache_path=str(cache))
        from service.pipeline.quantize.ort_quant import _FeedReader

        reader = type("R", (_FeedReader, q.CalibrationDataReader), {})(FEEDS, ["x"])
        q.quantize_static(str(model), str(out), reader, **kwargs)
        return cache, None
    info = quantized_by_ort(model, out, FEEDS, ["x"], quant_format="qdq", settings=settings, calibration_cache=cache)
    return cache, info


@pytest.mark.parametrize("build", ["conv_bn_matmul", "unquantized_ops"])
@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_ranges_and_file_equal_quantize_static_s_own_calibration(tmp_path, method, build):
    if build == "conv_bn_matmul":
        model = _conv_bn_matmul(tmp_path / "fp32.onnx", external=True, threshold=0)
    else:
        model = _with_ops_ort_does_not_quantize(tmp_path / "fp32.onnx")
    ort_cache, _ = _quantized(model, tmp_path / "ort.onnx", method, lean=False)
    our_cache, info = _quantized(model, tmp_path / "ours.onnx", method, lean=True)
    assert any("weights left in external data" in n for n in info.notes)  # the lean path ran
    ranges = json.loads(our_cache.read_text())
    assert ranges == json.loads(ort_cache.read_text())
    if build == "unquantized_ops":
        assert "c" in ranges["data"] and "s" not in ranges["data"]  # Sin -> Cos: no op ORT quantizes
    a, b = onnx.load(str(tmp_path / "ort.onnx")), onnx.load(str(tmp_path / "ours.onnx"))
    assert a.SerializeToString() == b.SerializeToString()
    assert not list(tmp_path.glob(".*augmented*"))  # its scratch graph is gone


def test_a_model_with_inline_weights_is_calibrated_by_quantize_static_as_usual(tmp_path):
    model = _conv_bn_matmul(tmp_path / "fp32.onnx", external=False)
    settings = resolved_ort_settings(ComparisonOptions())
    info = quantized_by_ort(model, tmp_path / "q.onnx", FEEDS, ["x"], quant_format="qdq", settings=settings,
                            calibration_cache=tmp_path / "ranges.json")
    assert not any("weights left in external data" in n for n in info.notes)
    assert (tmp_path / "ranges.json").is_file()
