"""Linear layers exported as MatMul + Add (Keras, TorchScript on 3-D inputs) reach PT2E as torch's own
Linear, its bias inside: as two ops, the bias was a separate add that PT2E's XNNPACK quantizer
quantized as an int8 activation between two requantizations (a 3-layer MLP: PT2E 34.2 dB as MatMul +
Add, 36.4 dB with the same weights as Gemm; ORT 37.3 dB both ways).

The oracle: the same network written as Gemm, through the same path, on the same samples."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pt2e_upload import pt2e_of_upload

D = 32


def _mlp(path, *, gemm: bool, bias_shape=(D,)):
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for i in range(2):
        w = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)
        b = (rng.standard_normal(bias_shape) * 0.5).astype(np.float32)
        inits += [numpy_helper.from_array(w.T.copy() if gemm else w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        if gemm:
            nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"], transB=1, name=f"fc{i}"))
        else:
            nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                      helper.make_node("Add", [f"m{i}", f"b{i}"], [f"h{i}"], name=f"bias{i}")]
        nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, D])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, D])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _pt2e(tmp_path, name, **kw):
    tool, samples = pt2e_of_upload(_mlp(tmp_path / f"{name}.onnx", **kw), tmp_path / f"{name}.pt2e.onnx",
                                   calibration_samples=8)
    path = tmp_path / f"{name}.pt2e.onnx"
    ops = collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return tool, ops, [session.run(None, feed)[0] for feed in samples.evaluation]


def test_matmul_add_quantizes_as_the_same_linear_as_gemm(tmp_path):
    _, gemm_ops, gemm_out = _pt2e(tmp_path, "gemm", gemm=True)
    tool, ops, out = _pt2e(tmp_path, "matmul_add", gemm=False)
    assert tool.conversion["parity"]["ok"]
    assert ops == gemm_ops, (ops, gemm_ops)  # no separate, quantized bias Add
    for a, b in zip(out, gemm_out):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bias_shape", [(1, D), (4, 1)])
def test_a_bias_that_is_not_one_per_column_stays_an_add(tmp_path, bias_shape):
    """[1, N] would broadcast a 1-D input up a rank, [rows, 1] adds per row: neither is linear's bias."""
    tool, ops, _ = _pt2e(tmp_path, "other", gemm=False, bias_shape=bias_shape)
    assert tool.conversion["parity"]["ok"] and ops["Add"] == 2
