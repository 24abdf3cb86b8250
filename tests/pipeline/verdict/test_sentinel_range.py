"""An attention mask's float32 minimum in the calibration data (padded batches) widens the range of
the mask Add ORT calibrates to ~1e38, and every ordinary score then quantizes to the zero point:
MiniLM on a tokenizer's padded batches read 2.5 dB on every path with no lint saying why. The
lint `sentinel_in_activation_range` names those tensors; the same model calibrated without padding
has no such range."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions
from tests import models

SEQ, DIM = 8, 16


@pytest.fixture(scope="module")
def masked_attention(tmp_path_factory):
    """scores = x W x^T / 4 + (1 - mask) * float32 min, softmax, then @ x W: a one-head attention."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((DIM, DIM)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "fmin"),
             numpy_helper.from_array(np.array(0.25, np.float32), "temp"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["q"], name="proj"),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="xt"),
             helper.make_node("MatMul", ["q", "xt"], ["s0"], name="scores"),
             helper.make_node("Mul", ["s0", "temp"], ["s1"], name="scale_scores"),
             helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT, name="cast_mask"),
             helper.make_node("Sub", ["one", "mf"], ["inv"], name="invert_mask"),
             helper.make_node("Mul", ["inv", "fmin"], ["bias"], name="mask_bias"),
             helper.make_node("Unsqueeze", ["bias", "axis1"], ["bias3"], name="unsqueeze_mask"),
             helper.make_node("Add", ["s1", "bias3"], ["masked"], name="mask_add"),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "q"], ["y"], name="context")]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, DIM]),
                                              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, SEQ])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, DIM])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("sentinel") / "attn.onnx"
    onnx.save(model, path)
    return path


def _job(model, tmp_path, padded: bool):
    rng = np.random.default_rng(1)
    mask = np.ones((6, 1, SEQ), np.int64)
    if padded:
        mask[:, :, 5:] = 0  # a tokenizer's padding: the last 3 positions of every row
    npz = tmp_path / "calib.npz"
    np.savez(npz, x=rng.standard_normal((6, 1, SEQ, DIM)).astype(np.float32), attention_mask=mask)
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 4, "eval_samples": 2,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    return run_comparison(ComparisonRequest(model_path=model, model_name="attn.onnx", calibration_path=npz,
                                            options=options), tmp_path / "job")


def test_a_mask_sentinel_in_the_calibration_range_is_named(masked_attention, tmp_path):
    report = _job(masked_attention, tmp_path, padded=True)
    lint = next(l for l in report.lints if l.code == "sentinel_in_activation_range")
    assert lint.artifact == "ort_qdq" and lint.severity == "error"
    assert "'masked'" in lint.message and "Softmax" in lint.message
    assert "nodes_to_exclude" in lint.hint and "without padding" in lint.hint
    scale = max(next(t for t in report.artifacts["ort_qdq"].quantization.tensors if t.name == "masked").scale)
    assert scale > 1e30  # what the lint reads: float32's minimum over 255 steps


def test_the_same_model_calibrated_without_padding_has_no_such_range(masked_attention, tmp_path):
    report = _job(masked_attention, tmp_path, padded=False)
    assert not [l for l in report.lints if l.code == "sentinel_in_activation_range"]
    assert report.artifacts["ort_qdq"].status == "ok"


def _sentinel_lint(path, x: np.ndarray, tmp_path):
    """The sentinel lint of an ort_qdq job on ``path`` calibrated on the samples ``x``."""
    npz = tmp_path / "calib.npz"
    np.savez(npz, x=x)
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 4, "eval_samples": 2,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, model_name="grow.onnx", calibration_path=npz,
                                              options=options), tmp_path / "job")
    return next(l for l in report.lints if l.code == "sentinel_in_activation_range")


def test_activations_that_are_themselves_that_large_are_not_blamed_on_a_mask(tmp_path):
    """onnx's caffe2-era light models (every weight a ConstantOfShape of 0.02, so values grow layer after
    layer: steps of 3.6e7 to 3.3e18 after Relu) got this lint saying the range is an attention mask's
    sentinel, with a hint about padding, for CNNs that have no mask. A mask's sentinel is a large
    negative value (the zero point at the top of the range); these ranges start at 0."""
    rng = np.random.default_rng(0)
    path = models.save("conv_chain", tmp_path / "grow.onnx", layers=3, kernel=3, pads=1, bias=False, fill=40.0, ir=8)
    lint = _sentinel_lint(path, np.abs(rng.standard_normal((6, 1, 4, 8, 8))).astype(np.float32) * 100, tmp_path)
    assert "mask" not in lint.message and "padding" not in lint.hint
    assert "start at 0" in lint.message


def test_large_values_of_both_signs_are_not_blamed_on_a_mask(tmp_path):
    """adaptive-terrain-diffusion's U-Net (opset 18) computes skip-connection Convs of ~1e12 on any input,
    of both signs, which the InstanceNormalization reading them rescales: the lint called them an attention
    mask's sentinel and pointed at padding. Here: three Convs of normal(0, 40) weights, no activation."""
    path = models.save("conv_chain", tmp_path / "grow.onnx", layers=3, kernel=3, pads=1, bias=False, act=None,
                       scale=40.0, ir=8)
    lint = _sentinel_lint(path, np.random.default_rng(0).standard_normal((6, 1, 4, 8, 8)).astype(np.float32) * 100,
                          tmp_path)
    assert "padding" not in lint.hint and "added to the scores" not in lint.message
    assert "both sides of 0" in lint.message and "the values themselves are that large" in lint.message
