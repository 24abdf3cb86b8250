"""ort.calibrate_method "entropy": ORT 1.32's quantize_static gives EntropyCalibrater 128 bins and 128
quantized bins, so the KL search tries one threshold, the whole histogram. Two probes found the
entropy files byte-identical to MinMax's while the report read "Entropy calibrator": now a note
says so, pinned here against the installed ORT on data with an outlier KL would clip."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model_and_feeds(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm1"), helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
         helper.make_node("MatMul", ["t", "w"], ["y"], name="mm2")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    feeds = []
    for _ in range(8):
        x = rng.standard_normal((64, 16)).astype(np.float32)
        x[0, 0] = 40.0  # one outlier among 1024 values: a KL threshold would clip it, MinMax keeps it
        feeds.append({"x": x})
    return feeds


def _scales(path):
    return {t.name: float(numpy_helper.to_array(t)) for t in onnx.load(str(path)).graph.initializer
            if t.name.endswith("_scale") and not t.dims}


def test_ort_s_entropy_calibration_gives_minmax_s_ranges_and_the_report_says_so(tmp_path):
    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_quant import ENTROPY_NOTE, quantized_by_ort

    feeds = _model_and_feeds(tmp_path / "m.onnx")
    tools, scales = {}, {}
    for method in ("minmax", "entropy", "percentile"):
        settings = resolved_ort_settings(ComparisonOptions.model_validate({"ort": {"calibrate_method": method}}))
        out = tmp_path / f"{method}.onnx"
        tools[method] = quantized_by_ort(tmp_path / "m.onnx", out, feeds, ["x"], quant_format="qdq", settings=settings)
        scales[method] = _scales(out)
    assert scales["entropy"] == scales["minmax"]  # the oracle: ORT's own files
    assert scales["percentile"]["x_scale"] < scales["minmax"]["x_scale"]  # a method that clips does differ
    assert ENTROPY_NOTE in tools["entropy"].notes
    assert ENTROPY_NOTE not in tools["minmax"].notes and ENTROPY_NOTE not in tools["percentile"].notes
