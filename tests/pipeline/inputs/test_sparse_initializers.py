"""Sparse initializers: written dense before any path reads the upload, to the values ORT itself
computes with (it densifies them at session creation). Before, every quantized path failed on them."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def _sparse_matmul(path, *, coordinates: bool):
    w = RNG.standard_normal((8, 4)).astype(np.float32)
    w[np.abs(w) < 0.6] = 0
    flat = np.flatnonzero(w)
    idx = np.stack(np.unravel_index(flat, w.shape), 1) if coordinates else flat
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(w.ravel()[flat], "W"),
                                       numpy_helper.from_array(idx.astype(np.int64), "W_idx"), list(w.shape))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                               helper.make_node("Relu", ["h"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _run(model_or_path, x):
    src = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("coordinates", [False, True], ids=["linear indices", "coordinates"])
def test_the_dense_model_computes_what_ort_computes_from_the_sparse_one(tmp_path, coordinates):
    from service.pipeline.inputs.sparse import densify_sparse_initializers

    path = _sparse_matmul(tmp_path / "s.onnx", coordinates=coordinates)
    model = onnx.load(str(path))
    note = densify_sparse_initializers(model)
    assert "1 sparse initializer(s) written dense ('W')" in note
    assert not model.graph.sparse_initializer and [t.name for t in model.graph.initializer] == ["W"]
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_array_equal(_run(model, x), _run(str(path), x))


def test_an_index_outside_the_dims_is_refused_with_what_to_do(tmp_path):
    from service.errors import InvalidModel
    from service.pipeline.inputs.sparse import densify_sparse_initializers

    model = onnx.load(str(_sparse_matmul(tmp_path / "s.onnx", coordinates=False)))
    sparse = model.graph.sparse_initializer[0]
    nnz = numpy_helper.to_array(sparse.values).size
    sparse.indices.CopyFrom(numpy_helper.from_array(np.full(nnz, 32, np.int64), "W_idx"))  # 8 x 4: 0..31
    with pytest.raises(InvalidModel, match="index outside its dims"):
        densify_sparse_initializers(model)


def test_every_path_quantizes_a_model_with_a_sparse_weight(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    path = _sparse_matmul(tmp_path / "s.onnx", coordinates=False)
    options = ComparisonOptions.model_validate({
        "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, model_name="s.onnx", options=options), tmp_path / "job")
    assert {n: a.status for n, a in report.artifacts.items()} == {
        "fp32": "ok", "pt2e_qdq": "ok", "ort_qdq": "ok", "ort_qoperator": "ok"}
    assert any("sparse initializer" in n for n in report.model.notes)
    assert report.artifacts["ort_qdq"].optimized["disable_all"].numerics.worst_sqnr_db > 20
