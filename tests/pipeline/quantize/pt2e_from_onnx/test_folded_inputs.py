"""Which inputs the ONNX -> torch conversion folds in as constants, and what the report says of it.

A tensor input the generated samples hold constant (an attention mask of ones) was folded in, and
MiniLM's PT2E file then ignored its mask: it attended over padding in every padded batch, with figures
that looked normal because evaluation used the same mask. Only scalars fold now (a sample rate whose
If torch.export cannot trace), and the lint ``pt2e_ignores_inputs`` says the file ignores them."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions
from tests import models

SEQ, DIM = 8, 16
QUICK = {"artifacts": ["pt2e_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
         "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}


def _masked_pooling(path):
    """mean over the positions attention_mask keeps of x @ W: the mask decides the output."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((DIM, DIM)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Unsqueeze", ["m", "axis2"], ["m3"], name="unsqueeze"),
             helper.make_node("Mul", ["h", "m3"], ["kept"], name="keep"),
             helper.make_node("ReduceSum", ["kept", "axis1"], ["total"], keepdims=0, name="sum"),
             helper.make_node("ReduceSum", ["m", "axis1"], ["count"], keepdims=1, name="count"),
             helper.make_node("Div", ["total", "count"], ["y"], name="mean")]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, DIM]),
                                              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, SEQ])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, DIM])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _branch_on_sample_rate(path):
    """An If on a scalar int64 'sr' (silero's shape): x @ W, then x 2 at 16 kHz, x 3 otherwise."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((DIM, DIM)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array(np.array(16000, np.int64), "k16"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"), numpy_helper.from_array(np.array(3.0, np.float32), "three")]
    then = models.branch("Mul", ["h", "two"], "b", [1, DIM])
    other = models.branch("Mul", ["h", "three"], "b", [1, DIM])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
             helper.make_node("Equal", ["sr", "k16"], ["is16"], name="is16k"),
             helper.make_node("If", ["is16"], ["y"], then_branch=then, else_branch=other, name="by_rate")]
    graph = helper.make_graph(nodes, "rate", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, DIM]),
                                              helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, DIM])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _run(path, feed):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def test_a_mask_the_samples_hold_at_ones_is_still_read_by_the_pt2e_file(tmp_path):
    model = _masked_pooling(tmp_path / "pool.onnx")
    report = run_comparison(ComparisonRequest(model_path=model, model_name="pool.onnx",
                                              options=ComparisonOptions.model_validate(QUICK)), tmp_path / "job")
    pt2e = report.artifacts["pt2e_qdq"]
    assert pt2e.status == "ok" and pt2e.tool.conversion["folded_inputs"] == {}
    x = np.random.default_rng(3).standard_normal((1, SEQ, DIM)).astype(np.float32)
    padded = np.array([[1] * 3 + [0] * (SEQ - 3)], np.int64)
    full = np.ones((1, SEQ), np.int64)
    art = tmp_path / "job" / "artifacts"
    for name in ("fp32", "pt2e_qdq"):  # padding moves the output of both files alike
        moved = np.abs(_run(art / f"{name}.onnx", {"x": x, "attention_mask": padded})
                       - _run(art / f"{name}.onnx", {"x": x, "attention_mask": full})).max()
        assert moved > 0.1, name
    assert not [l for l in report.lints if l.code == "pt2e_ignores_inputs"]


def test_a_folded_sample_rate_is_named_as_ignored_by_the_pt2e_file(tmp_path):
    model = _branch_on_sample_rate(tmp_path / "rate.onnx")
    options = ComparisonOptions.model_validate({**QUICK, "input_values": {"sr": {"constant": 16000}}})
    report = run_comparison(ComparisonRequest(model_path=model, model_name="rate.onnx", options=options), tmp_path / "job")
    assert report.artifacts["pt2e_qdq"].status == "ok"
    assert report.artifacts["pt2e_qdq"].tool.conversion["folded_inputs"] == {"sr": "16000"}
    lint = next(l for l in report.lints if l.code == "pt2e_ignores_inputs")
    assert "as if sr = 16000 in every call" in lint.message and "options.input_values" in lint.hint
    # what the lint states, on the files: another rate changes fp32's output and not the PT2E file's
    x = np.ones((1, DIM), np.float32)
    art = tmp_path / "job" / "artifacts"
    at = {name: [_run(art / f"{name}.onnx", {"x": x, "sr": np.array(r, np.int64)}) for r in (16000, 8000)]
          for name in ("fp32", "pt2e_qdq")}
    assert not np.allclose(*at["fp32"]) and np.array_equal(*at["pt2e_qdq"])
