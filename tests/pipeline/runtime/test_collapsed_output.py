"""An output the quantized file computes as one constant: rapidocr 1.2.3's PP-OCRv3 detector on
generated samples wrote 0.0 at every pixel in all three quantized files while fp32's probability map
varied; the report showed 0.0 dB and a passing verdict, and no lint said the figure measured a constant.
Here an output whose offset dwarfs its spread (x * 0.001 + 1000): ORT's quantize_static calibrates a
range that includes 0, so one uint8 step is about 4 and every value rounds to the same one."""
from __future__ import annotations

import numpy as np

from service.pipeline.runtime.numerics import collapsed_to


def test_a_single_value_where_fp32_varies_is_a_collapse():
    ref = np.array([1.0, 1.001, 0.999], np.float32)
    assert collapsed_to(ref, np.full(3, 1.0, np.float32)) == 1.0
    assert collapsed_to(ref, np.array([1.0, 1.0, 0.99], np.float32)) is None
    # fp32 constant too: nothing collapsed; non-finite values belong to lint nonfinite_outputs
    assert collapsed_to(np.ones(3, np.float32), np.ones(3, np.float32)) is None
    assert collapsed_to(ref, np.full(3, np.nan, np.float32)) is None


def _offset_model(path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Mul", ["x", "k"], ["small"], name="scale"),
             helper.make_node("Add", ["small", "offset"], ["y"], name="offset")]
    graph = helper.make_graph(nodes, "offset", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [numpy_helper.from_array(np.array(0.001, np.float32), "k"),
                               numpy_helper.from_array(np.array(1000.0, np.float32), "offset")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_quantized_output_that_is_one_constant_is_named(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    (tmp_path / "input").mkdir()
    model = tmp_path / "input" / "model.onnx"
    _offset_model(model)
    options = ComparisonOptions(artifacts=["ort_qdq"], levels=["disable_all"], calibration_samples=2,
                                eval_samples=2, latency={"enabled": False}, advice={"enabled": False},
                                layers={"enabled": False})
    report = run_comparison(ComparisonRequest(options=options, model_path=model, model_name="offset"), tmp_path)
    out = report.artifacts["ort_qdq"].optimized["disable_all"].numerics.outputs[0]
    assert out.constant_value is not None and abs(out.constant_value - 1000.0) < 5.0
    lint = next(x for x in report.lints if x.code == "collapsed_output")
    assert lint.artifact == "ort_qdq" and lint.severity == "warning" and "'y'" in lint.message
