"""Float16 uploads, as onnxruntime.transformers.float16.convert_float_to_float16 writes them (with
``keep_io_types`` a float32 interface over a float16 graph, without it float16 inputs too).

Before: the PT2E file quantized float16 tensors with float32 scales (ORT refused it), ORT's
QOperator quantizer failed on a bias it could not find (quant_pre_process had put every weight
behind a Cast), a transformer's ORT files held float16 scales DequantizeLinear takes only from
opset 19, and with ``keep_io_types`` the upload was refused outright (the converter lists each
input's Cast after its readers). Now every path quantizes the upload's float32 copy
(quantize/float32_copy.py) and runs int8 kernels.

The ORT facts the copy rests on are pinned here in the installed ORT: its CPU optimizer wraps
float16 nodes in ``InsertedPrecisionFreeCast_`` Casts, and a float16 QDQ Conv is not fused while
the same float32 one is."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.quantize.float32_copy import widen_half_to_float32

F, H = TensorProto.FLOAT, TensorProto.FLOAT16


def _conv_net(dtype=np.float32, elem=F, opset=17) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(dtype), "w"),
             numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(dtype), "b"),
             numpy_helper.from_array((rng.standard_normal((8, 4)) * 0.3).astype(dtype), "fw")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fw"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", elem, [1, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _embedding_net() -> onnx.ModelProto:
    """Token ids -> Gather of an embedding table -> MatMul: ORT's CPU EP has a float16 Gather, so
    no Cast comes between the table and its reader, and ORT's quantizer wrote float16 scales that
    DequantizeLinear takes only from opset 19 (the file was refused: a transformer's case)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((50, 16)).astype(np.float32), "table"),
             numpy_helper.from_array((rng.standard_normal((16, 4)) * 0.3).astype(np.float32), "proj")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("MatMul", ["e", "proj"], ["y"], name="proj_mm")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 8, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _float16(keep_io_types: bool, build=_conv_net) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(build(), keep_io_types=keep_io_types)


_OPTIONS = {"levels": ["disable_all", "extended"], "calibration_samples": 2, "eval_samples": 1,
            "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}


@pytest.mark.parametrize("keep_io_types, build", [(True, _conv_net), (False, _conv_net), (True, _embedding_net)],
                         ids=["float32 interface", "float16 interface", "embedding"])
def test_a_float16_upload_is_quantized_on_every_path_and_runs_int8_kernels(tmp_path, keep_io_types, build):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    path = tmp_path / "m16.onnx"
    onnx.save(_float16(keep_io_types, build), path)
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # ORT runs the upload as it is
    report = run_comparison(ComparisonRequest(model_path=path, model_name="m16.onnx",
                                              options=ComparisonOptions.model_validate(_OPTIONS)), tmp_path / "job")
    arts = report.artifacts
    assert all(a.status == "ok" for a in arts.values()), {n: a.error for n, a in arts.items()}
    assert report.model.inputs[0].dtype == ("int64" if build is _embedding_net else
                                            "float32" if keep_io_types else "float16")
    for name in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        extended = arts[name].optimized["extended"]
        assert extended.int8_coverage == 1.0, (name, extended.op_histogram)
        assert extended.numerics.worst_sqnr_db > 25, (name, extended.numerics.worst_sqnr_db)
        written = onnx.load(str(tmp_path / "job" / "artifacts" / f"{name}.onnx"))
        assert [i.type.tensor_type.elem_type for i in written.graph.input] == \
               [i.type.tensor_type.elem_type for i in onnx.load(str(path)).graph.input]  # the upload's interface
    assert any("float32 copy" in n for n in arts["pt2e_qdq"].tool.conversion["notes"])
    for name in ("ort_qdq", "ort_qoperator"):
        assert "quantized as its float32 copy" in " ".join(arts[name].tool.notes), arts[name].tool.notes
    if keep_io_types and build is _conv_net:  # the converter put the input Cast after its readers; ORT sorts
        assert any("topological order" in n for n in report.model.notes)
        onnx.checker.check_model(onnx.load(str(tmp_path / "job" / "artifacts" / "fp32.onnx")))


def test_ort_s_cpu_optimizer_casts_a_float16_graph_s_weights_to_float_and_the_copy_has_none(tmp_path):
    """What quant_pre_process handed the quantizer for a float16 graph: every weight behind an
    InsertedPrecisionFreeCast_ Cast (insert_cast_transformer.cc), which nothing folds; none for the
    float32 graph, and none for the float32 copy, whose weights are the upload's, widened exactly."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    def pre_processed(model, name):
        src, out = tmp_path / f"{name}.onnx", tmp_path / f"{name}.pre.onnx"
        onnx.save(model, src)
        quant_pre_process(str(src), str(out))
        return onnx.load(str(out))

    half = _float16(keep_io_types=True)
    casts = {n.input[0]: n.output[0] for n in pre_processed(half, "half").graph.node if n.op_type == "Cast"}
    assert {"w", "b", "fw"} <= set(casts)
    assert all(casts[w].startswith("InsertedPrecisionFreeCast_") for w in ("w", "b", "fw"))
    assert not [n for n in pre_processed(_conv_net(), "float").graph.node if n.op_type == "Cast"]

    copy = onnx.ModelProto()
    copy.CopyFrom(half)
    notes: list[str] = []
    widen_half_to_float32(copy, notes)
    assert notes and "float32 copy" in notes[0]
    assert not [n for n in pre_processed(copy, "copy").graph.node
                if n.op_type == "Cast" and n.output[0].startswith("InsertedPrecisionFreeCast_")]
    halves = {t.name: numpy_helper.to_array(t) for t in half.graph.initializer}
    for t in copy.graph.initializer:
        assert t.data_type == F
        np.testing.assert_array_equal(numpy_helper.to_array(t), halves[t.name].astype(np.float32))


def test_a_weight_stored_in_float16_and_cast_where_it_is_read_becomes_an_initializer():
    """silero-vad's half model: float32 compute, weights stored float16 behind a Cast each. ORT's
    quantizer quantizes a weight only when it is an initializer, so the copy folds the Cast."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float16).reshape(3, 4), "w16")
    g = helper.make_graph([helper.make_node("Cast", ["w16"], ["w"], to=F), helper.make_node("MatMul", ["x", "w"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", F, [1, 3])], [helper.make_tensor_value_info("y", F, [1, 4])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    widen_half_to_float32(model, [])
    assert [n.op_type for n in model.graph.node] == ["MatMul"]
    assert [t.name for t in model.graph.initializer] == ["w"]
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[0]),
                                  numpy_helper.to_array(w).astype(np.float32))


def _qdq_conv(elem, dtype) -> onnx.ModelProto:
    """DQ(x) and DQ(w) -> Conv -> Q -> DQ, opset 21 (float16 Q/DQ is legal from 19)."""
    scale = numpy_helper.from_array(np.array(0.05, dtype), "s")
    inits = [scale, numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.ones((4, 3, 3, 3), np.int8), "wq")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", elem, [1, 4, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def test_a_quantized_float16_conv_runs_no_int8_kernel_on_the_cpu_ep_and_the_float32_one_does(tmp_path):
    """Why the paths quantize a float32 view: the one condition changed is the float type."""
    def ops_at_extended(model, name):
        out = tmp_path / f"{name}.opt.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(out)
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return {n.op_type for n in onnx.load(str(out)).graph.node}

    assert "QLinearConv" in ops_at_extended(_qdq_conv(F, np.float32), "f32")
    half = ops_at_extended(_qdq_conv(H, np.float16), "f16")
    assert "QLinearConv" not in half and "Conv" in half
