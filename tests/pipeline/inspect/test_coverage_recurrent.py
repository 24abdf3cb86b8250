"""int8_coverage over each level graph's own compute ops, LSTM/GRU/RNN among them. An LSTM + MatMul
model read coverage 1.0 on every path while the LSTM ran in float: the denominator was fp32's one
MatMul (LSTM was not a compute op), and PT2E's unrolled Gemms (3 int8 of 13) were capped at 1.0."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _lstm_head(path, with_lstm: bool):
    rng = np.random.default_rng(0)
    hidden, feat = 8, 4
    inits = [numpy_helper.from_array(rng.standard_normal((hidden, 3)).astype(np.float32), "head_w")]
    nodes = []
    if with_lstm:
        inits += [numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, feat)).astype(np.float32) * 0.5, "W"),
                  numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.5, "R")]
        nodes += [helper.make_node("LSTM", ["x", "W", "R"], ["", "h"], hidden_size=hidden, name="lstm"),
                  helper.make_node("Squeeze", ["h", "axis0"], ["hs"], name="sq")]
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
        head_in, x_shape = "hs", [5, 2, feat]
    else:
        inits.append(numpy_helper.from_array(rng.standard_normal((feat, hidden)).astype(np.float32), "proj_w"))
        nodes.append(helper.make_node("MatMul", ["x", "proj_w"], ["p"], name="proj"))
        head_in, x_shape = "p", [2, feat]
    nodes.append(helper.make_node("MatMul", [head_in, "head_w"], ["y"], name="head"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _level_all(path, workdir):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq", "ort_qoperator"], "levels": ["all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, model_name=path.name, options=options), workdir)
    return {n: a.optimized["all"] for n, a in report.artifacts.items() if n != "fp32"}


def test_an_lstm_left_in_float_counts_against_int8_coverage(tmp_path):
    for name, level in _level_all(_lstm_head(tmp_path / "lstm.onnx", True), tmp_path / "lstm").items():
        assert level.compute_ops_float.get("LSTM") == 1, (name, level.compute_ops_float)
        assert level.compute_ops_int8 == 1 and level.int8_coverage == 0.5, (name, level.int8_coverage)
    for name, level in _level_all(_lstm_head(tmp_path / "mlp.onnx", False), tmp_path / "mlp").items():
        assert level.int8_coverage == 1.0 and not level.compute_ops_float, (name, level)
