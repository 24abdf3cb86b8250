"""torchao's XNNPACK config builds every observer with eps=2**-12: a weight channel whose largest |w|
is under 127 x 2**-12 gets the floor as its scale, and its small values quantize to 0. PP-OCRv4's
detector (a BatchNorm folded into the Conv after its FPN Concat, |w| <= 2e-4) came out "ok" with an
all-zero probability map at 0.0 dB and no word on why; ORT's scales there were 1.6e-6."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.inspect.graph_summary import TORCHAO_XNNPACK_EPS, scales_at_floor
from service.pipeline.vocabulary import graph_from_model
from tests import models


def _conv(path, weight_scale: float):
    return models.save("conv", path, x_shape=[1, 8, 16, 16], cout=8, pads=1, scale=weight_scale,
                       bias=np.zeros(8, np.float32), names=("conv",), ir=8)


def _report(path, workdir):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2,
        "eval_samples": 1, "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False},
        "input_values": {"x": {"low": -1000, "high": 1000}}})
    return run_comparison(ComparisonRequest(model_path=path, model_name=path.name, options=options), workdir)


def _int8_weight(path):
    m = onnx.load(str(path))
    return next(numpy_helper.to_array(t) for t in m.graph.initializer
                if t.data_type == TensorProto.INT8 and len(t.dims) == 4)


@pytest.mark.parametrize("weight_scale", [1e-4, 1e-1], ids=["under-the-floor", "above-it"])
def test_a_weight_under_torchao_s_floor_is_named(tmp_path, weight_scale):
    report = _report(_conv(tmp_path / "m.onnx", weight_scale), tmp_path / "job")
    pt2e = _int8_weight(tmp_path / "job" / "artifacts" / "pt2e_qdq.onnx")
    ort = _int8_weight(tmp_path / "job" / "artifacts" / "ort_qdq.onnx")
    lint = [x for x in report.lints if x.code == "pt2e_scale_floor"]
    if weight_scale < 1e-3:
        # the oracle: torchao's file holds mostly zeros where ORT's does not
        assert (pt2e == 0).mean() > 0.5 and (ort == 0).mean() < 0.05
        assert len(lint) == 1 and lint[0].severity == "error" and lint[0].artifact == "pt2e_qdq"
        assert "the Conv writing 'y': 8 of 8 channels" in lint[0].message and "eps=2**-12" in lint[0].message
    else:
        assert np.abs(pt2e).max() == 127 and not lint


def _dq_weight(q: np.ndarray, scale: np.ndarray):
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
         helper.make_node("Conv", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(q, "wq"), numpy_helper.from_array(scale.astype(np.float32), "ws"),
         numpy_helper.from_array(np.zeros(len(scale), np.int8), "wz")])
    return graph_from_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_scale_that_only_equals_the_floor_is_not_taken_for_it():
    """A channel whose largest |q| is 127 had its scale computed, not raised: it is not counted; nor is
    a channel of zeros only, which a pruned model stores as it was."""
    assert scales_at_floor(_dq_weight(np.zeros((2, 2, 1, 1), np.int8), np.array([TORCHAO_XNNPACK_EPS] * 2))) == []
    q = np.zeros((2, 2, 1, 1), np.int8)
    q[0, 0] = 127  # channel 0: the observer's own scale, which happens to be 2**-12
    q[1, 0] = 3    # channel 1: three steps of the floor
    (w,) = scales_at_floor(_dq_weight(q, np.array([TORCHAO_XNNPACK_EPS, TORCHAO_XNNPACK_EPS])))
    assert (w.name, w.reader, w.channels, w.of, w.zero_share) == ("wq", "Conv ''", 1, 2, 0.5)
    assert scales_at_floor(_dq_weight(q, np.array([TORCHAO_XNNPACK_EPS, 1e-3]))) == []
