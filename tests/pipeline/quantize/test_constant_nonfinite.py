"""A NaN fill value the graph builds from shapes alone (ConstantOfShape(value=NaN) selected by Where, as
graph networks write a segment reduction): both ORT paths failed NonFiniteCalibration blaming the samples,
and the nodes_to_exclude it suggested failed too (issue 42). No sample reaches the fill: the job says so,
and quantizes again without the op type ORT measures it through. Real ORT throughout."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.inputs.stored_nonfinite import made_without_samples
from service.schemas.options import ComparisonOptions

QUICK = {"artifacts": ["ort_qdq", "ort_qoperator"], "levels": ["disable_all"], "calibration_samples": 4,
         "eval_samples": 2, "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}


def _nan_fill(path, fill: float = np.nan):
    """x[n, 8] -> MatMul -> h; a = Where(Not(IsNaN(h)), h, ConstantOfShape(Shape(h), fill)) -> Relu -> MatMul.
    The dim n is symbolic, so ORT's pre-processing cannot fold the fill into an initializer (which its
    calibrator would not measure)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Shape", ["h"], ["hs"], name="shape"),
        helper.make_node("ConstantOfShape", ["hs"], ["fill"], name="nan_fill",
                         value=numpy_helper.from_array(np.array([fill], np.float32))),
        helper.make_node("IsNaN", ["h"], ["isnan"], name="isnan"),
        helper.make_node("Not", ["isnan"], ["keep"], name="not"),
        helper.make_node("Where", ["keep", "h", "fill"], ["a"], name="select"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, "W"),
         numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32) * 0.3, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_nan_fill_built_from_shapes_is_named_and_the_path_quantizes_without_where(tmp_path):
    report = run_comparison(ComparisonRequest(model_path=_nan_fill(tmp_path / "fill.onnx"),
                                              options=ComparisonOptions.model_validate(QUICK)), tmp_path / "job")
    for name in ("ort_qdq", "ort_qoperator"):
        art = report.artifacts[name]
        assert art.status == "ok", (name, art.error)
        note = next(n for n in art.tool.notes if "no sample decides them" in n)
        assert "'fill' (Shape 'shape' -> ConstantOfShape 'nan_fill')" in note
        assert "without Where" in note and "nodes_to_exclude or not" in note
        used = art.tool.settings["op_types_to_quantize"]
        assert "Where" not in used and "MatMul" in used
        assert art.optimized["disable_all"].numerics.worst_sqnr_db is not None


def test_ort_measures_the_fill_through_an_excluded_where_and_not_through_a_left_out_op_type(tmp_path):
    """What the retry rests on, in the installed ORT: nodes_to_exclude on the Where still calibrates its
    inputs and asserts; the same list of op types without Where quantizes."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    from service.pipeline.quantize.ort_calibration import default_op_types

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32)}
                               for i in range(2)])

        def get_next(self):
            return next(self.feeds, None)

    path = _nan_fill(tmp_path / "fill.onnx")
    with pytest.raises(AssertionError, match="scale issue"):
        quantize_static(str(path), str(tmp_path / "excluded.onnx"), Reader(), nodes_to_exclude=["select", "nan_fill"])
    quantize_static(str(path), str(tmp_path / "op_types.onnx"), Reader(),
                    op_types_to_quantize=[t for t in default_op_types() if t != "Where"])
    assert "QuantizeLinear" in {n.op_type for n in onnx.load(str(tmp_path / "op_types.onnx")).graph.node}


def test_what_the_samples_reach_is_not_called_constant(tmp_path):
    model = onnx.load(str(_nan_fill(tmp_path / "fill.onnx")))
    assert made_without_samples(model, "fill") == ["Shape 'shape'", "ConstantOfShape 'nan_fill'"]
    assert made_without_samples(model, "a") is None  # the Where selects h, which x reaches
    assert made_without_samples(model, "x") is None
    # the shape of a selection's rows moves with the values: a fill of that shape is the samples'
    nz = helper.make_node("NonZero", ["x"], ["idx"], name="nz")
    shape = helper.make_node("Shape", ["idx"], ["s"], name="s")
    fill = helper.make_node("ConstantOfShape", ["s"], ["f"], name="f")
    g = helper.make_graph([nz, shape, fill], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)])
    assert made_without_samples(helper.make_model(g), "f") is None
