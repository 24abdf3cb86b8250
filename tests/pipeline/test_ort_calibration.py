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

from service.pipeline.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.quantize.ort_quant import quantized_by_ort
from tests.pipeline.test_pre_process_external import _conv_bn_matmul

FEEDS = [{"x": np.random.default_rng(i).standard_normal((2, 3, 8, 8)).astype(np.float32)} for i in range(4)]


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


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_ranges_and_file_equal_quantize_static_s_own_calibration(tmp_path, method):
    model = _conv_bn_matmul(tmp_path / "fp32.onnx", external=True, threshold=0)
    ort_cache, _ = _quantized(model, tmp_path / "ort.onnx", method, lean=False)
    our_cache, info = _quantized(model, tmp_path / "ours.onnx", method, lean=True)
    assert any("weights left in external data" in n for n in info.notes)  # the lean path ran
    assert json.loads(our_cache.read_text()) == json.loads(ort_cache.read_text())
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
