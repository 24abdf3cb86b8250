"""ORT's pre-processing of a model whose weights are in external data, without loading the weights.

The oracle is ORT's own ``quant_pre_process`` on the same file: the graph that comes out is the
same (ops, names, shapes), it computes the same outputs, and quantizing either gives the same file.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.schemas.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.quantize.ort_quant import preprocessed_for_ort, quantized_by_ort
from service.pipeline.ort.sessions import session_for


def _conv_bn_matmul(path, *, external: bool, threshold: int = 1024):
    """Conv -> BatchNormalization (basic level fuses it) -> Relu -> Reshape -> MatMul, weights > 1 KiB."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "var"),
             numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((16 * 8 * 8, 10)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"], name="bn"),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if external:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data", size_threshold=threshold)
    else:
        onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module", params=[1024, 0], ids=["small-inline", "all-external"])
def both(request, tmp_path_factory):
    """(stock quant_pre_process on the inline file, ours on the same model with external data).
    ``all-external``: every initializer in the data file, the Reshape's target shape too (some
    exporters write them all), which shape inference must still read."""
    inline_dir, ext_dir = tmp_path_factory.mktemp("inline"), tmp_path_factory.mktemp("external")
    for d in (inline_dir, ext_dir):
        (d / "scratch").mkdir()
    inline = _conv_bn_matmul(inline_dir / "fp32.onnx", external=False)
    ext = _conv_bn_matmul(ext_dir / "fp32.onnx", external=True, threshold=request.param)
    stock, stock_note = preprocessed_for_ort(inline, inline_dir / "scratch" / "pre.onnx")
    ours, our_note = preprocessed_for_ort(ext, ext_dir / "scratch" / "pre.onnx")
    return (stock, stock_note), (ours, our_note)


def test_the_graph_is_the_one_quant_pre_process_writes(both):
    (stock, stock_note), (ours, our_note) = both
    assert "weights left in external data" in our_note and "weights left" not in stock_note
    a, b = onnx.load(str(stock)), onnx.load(str(ours))
    assert [(n.op_type, n.name) for n in a.graph.node] == [(n.op_type, n.name) for n in b.graph.node]
    assert "BatchNormalization" not in {n.op_type for n in b.graph.node}  # ORT's basic level ran
    assert {v.name for v in a.graph.value_info} == {v.name for v in b.graph.value_info}  # shapes inferred alike
    assert {p.key: p.value for p in a.metadata_props} == {p.key: p.value for p in b.metadata_props}
    # The weights stay in a file of their own next to the output (the graph alone is small).
    graph_only = onnx.load(str(ours), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in graph_only.graph.initializer)
    assert (ours.parent / f"{ours.name}.data").exists() and ours.stat().st_size < 4096


def test_it_computes_what_quant_pre_process_s_file_computes_and_quantizes_alike(both, tmp_path):
    (stock, _), (ours, _) = both
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    want = session_for(stock, "disable_all").run(None, {"x": x})[0]
    got = session_for(ours, "disable_all").run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32)} for i in range(4)]
    q_stock, q_ours = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for src, dst in ((stock, q_stock), (ours, q_ours)):
        quantized_by_ort(src, dst, feeds, ["x"], quant_format="qdq", settings=resolved_ort_settings(ComparisonOptions()))
    a, b = onnx.load(str(q_stock)), onnx.load(str(q_ours))
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
    wa = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    wb = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)
