"""torch.onnx.export writes a quantized nn.Linear on a 3-D input as DQ(x), DQ(w) -> Transpose,
MatMul, Add(bias) -> Q. The inventory took that MatMul and Add for float ops "no Q/DQ around it"
(MiniLM's PT2E file listed no MatMul among 24 of them), while ORT fuses each such unit into one
QGemm at extended. Pinned in the installed ORT: with a constant bias the unit becomes QGemm; with
an activation in the Add's place, the Add stays a float op."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.inspect.inventory import inventory_from_onnx


def _linear(bias_is_constant: bool):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (8, 16)).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.full(8, 0.01, np.float32), "w_s"), numpy_helper.from_array(np.zeros(8, np.int8), "w_zp"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "zp"),
             numpy_helper.from_array(np.array(0.1, np.float32), "s_out"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bias")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["wd"], axis=0),
             helper.make_node("Transpose", ["wd"], ["wt"], perm=[1, 0], name="weight_t"),
             helper.make_node("MatMul", ["xd", "wt"], ["mm"], name="linear_mm"),
             helper.make_node("Add", ["mm", "bias" if bias_is_constant else "other"], ["lin"], name="linear_add"),
             helper.make_node("QuantizeLinear", ["lin", "s_out", "zp"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s_out", "zp"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])]
    if not bias_is_constant:
        inputs.append(helper.make_tensor_value_info("other", TensorProto.FLOAT, [1, 4, 8]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _ops_at_extended(model, tmp_path) -> list[str]:
    src, out = tmp_path / "m.onnx", tmp_path / "m.extended.onnx"
    onnx.save(model, src)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(out)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(str(out)).graph.node]


@pytest.mark.parametrize("bias_is_constant", [True, False], ids=["constant bias", "activation added"])
def test_a_linear_unit_is_quantized_where_ort_fuses_it(bias_is_constant, tmp_path):
    model = _linear(bias_is_constant)
    inventory = inventory_from_onnx(model)
    ops = _ops_at_extended(model, tmp_path)
    if bias_is_constant:
        assert "QGemm" in ops and "MatMul" not in ops and "Add" not in ops  # ORT: one int8 unit
        assert inventory.ops_quantized == {"Add": 1, "MatMul": 1} and inventory.ops_float == {}
    else:
        assert "Add" in ops and "QGemm" not in ops  # the Add runs in float
        assert inventory.ops_float == {"Add": 1, "MatMul": 1}
        assert inventory.ops_float_reasons["MatMul"] == "inputs are dequantized but the output is not quantized"
    assert "Transpose" not in inventory.ops_float and "Transpose" not in inventory.ops_quantized  # weight layout


def test_ops_of_one_type_left_float_for_different_reasons_say_each_with_its_count():
    """One reason per op type spoke for every node of that type."""
    model = _linear(False)
    g = model.graph
    g.node.append(helper.make_node("MatMul", ["x", "x_t"], ["mm2"], name="float_mm"))
    g.node.append(helper.make_node("Transpose", ["x"], ["x_t"], perm=[0, 2, 1], name="x_t"))
    g.output.append(helper.make_tensor_value_info("mm2", TensorProto.FLOAT, None))
    reasons = inventory_from_onnx(model).ops_float_reasons["MatMul"]
    assert reasons == ("inputs are dequantized but the output is not quantized (x1); "
                       "not quantized by this tool (no Q/DQ around it) (x1)")
