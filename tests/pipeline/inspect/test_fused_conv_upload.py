"""An upload ORT already optimized holds com.microsoft.FusedConv (Conv + activation). ORT's quantizer
has no rule for it and leaves its weight float, but its neighbours' Q/DQ surround it: the summary
listed "com.microsoft.FusedConv x4" among the quantized ops of MarbleNet's ort_qdq file (fasr-vad-
marblenet 0.5.8), whose blocker table said every FusedConv runs in float. Its float weight keeps it
float, as a Conv's does."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def test_a_fused_conv_with_a_float_weight_between_q_dq_is_float(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 3)).astype(np.float32) * 0.3, f"w{k}") for k in range(3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="c0", pads=[1, 1]),
             helper.make_node("FusedConv", ["a", "w1"], ["b"], name="fused", domain="com.microsoft",
                              activation="Relu", pads=[1, 1]),
             helper.make_node("Conv", ["b", "w2"], ["y"], name="c2", pads=[1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16])], inits)
    # an optimized file keeps the types ORT inferred; ONNX shape inference has none for FusedConv
    graph.value_info.extend([helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, 4, 16]) for t in ("a", "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "m.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "m.onnx", model_name="m.onnx", options=options),
                            tmp_path / "job")
    art = report.artifacts["ort_qdq"]
    assert art.status == "ok", art.error
    written = onnx.load(tmp_path / "job" / "artifacts" / "ort_qdq.onnx")
    fused = next(n for n in written.graph.node if n.op_type == "FusedConv")
    assert fused.input[1] in {i.name for i in written.graph.initializer}  # ORT left its weight float
    q = art.quantization
    assert "com.microsoft.FusedConv" not in q.ops_quantized, q.ops_quantized
    assert q.ops_float.get("com.microsoft.FusedConv") == 1, q.ops_float
    assert q.ops_quantized.get("Conv") == 2, q.ops_quantized
