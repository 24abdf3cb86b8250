"""Conv+BatchNorm folding when only some BatchNormalization fold: ORT's ConvBNFusion folds a BN that
follows a Conv, not one after a Relu (pinned here on fp32's own levels). The decision row read
"never" for a file where 1 of 2 folded (PP-OCRv5 det: 2 of 3); it now gives the share."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _conv_bn_then_relu_bn(path) -> None:
    rng = np.random.default_rng(0)
    c = 4
    inits = [numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32), "w")]
    for k in ("1", "2"):
        inits += [numpy_helper.from_array(v.astype(np.float32), n + k) for n, v in (
            ("g", rng.random(c) + 0.5), ("b", rng.standard_normal(c)), ("m", rng.standard_normal(c)), ("v", rng.random(c) + 0.5))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g1", "b1", "m1", "v1"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "g2", "b2", "m2", "v2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_partial_fold_reads_as_a_share_not_never(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    _conv_bn_then_relu_bn(tmp_path / "m.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all", "basic"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False},
        "ort": {"pre_process": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "m.onnx", model_name="m.onnx", options=options),
                            tmp_path / "job")
    fp32 = report.artifacts["fp32"].optimized
    assert [fp32[lv].op_histogram.get("BatchNormalization", 0) for lv in ("disable_all", "basic")] == [2, 1]
    row = next(d for d in report.decisions if d.decision == "Conv+BatchNorm folding")
    assert row.where["fp32"] == "at session level basic (1 of 2)"  # was "never"
    assert row.detail["fp32"] == "2 of 2 in the file; 1 fold at no level"
