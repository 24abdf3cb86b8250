"""One ``int8_coverage`` (``vocabulary.int8_coverage``), counted over the graph ORT saved for a level, in
the levels stage and in advice's "before" and "after" alike.

Three minimal models where the fp32 file holds other compute ops than the graph ORT runs, or where a
weight comes first:
- ``U @ V``: a weight stored as the product of two initializers. ORT's constant folding (level basic,
  which ORT's quantization pre-processing runs) makes it one initializer, so the quantized file holds
  one MatMul where the fp32 file holds two. Advice divided by the fp32 file's 2: 0.5 where ORT runs
  its one MatMul in int8 (1.0).
- a model-local function holding a MatMul: ORT inlines it (even at disable_all), and quantize_static
  leaves it in float. Advice divided by the fp32 file's one main-graph MatMul: 1.0, where ORT runs 1
  of 2 in float.
- ``MatMul(W, x)`` left in float (nodes_to_exclude): the levels stage skipped a float op whose first
  input is a weight, so coverage read 1.0 where ORT runs 1 of 2 compute ops in float.

Oracle: the saved graph file itself, counted here by op type alone (these models hold float
MatMuls and ONNX/contrib int8 kernels only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

_INT8 = {"QLinearMatMul", "MatMulInteger", "MatMulIntegerToFloat", "QLinearConv", "ConvInteger", "QGemm"}
_FLOAT = {"MatMul", "FusedMatMul", "Gemm", "FusedGemm", "Conv", "FusedConv"}


def _save(path: Path, nodes, inits, x_shape, y_shape, functions=(), domains=()) -> Path:
    graph = helper.make_graph(nodes, path.stem, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _weights(rng, *specs):
    return [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in specs]


def _u_at_v(d: Path) -> tuple[Path, list[str] | None]:
    inits = _weights(np.random.default_rng(0), ("U", (16, 4)), ("V", (4, 16)))
    nodes = [helper.make_node("MatMul", ["U", "V"], ["W"], name="uv"),
             helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")]
    return _save(d / "u_at_v.onnx", nodes, inits, [4, 16], [4, 16]), None


def _local_function(d: Path) -> tuple[Path, list[str] | None]:
    inits = _weights(np.random.default_rng(1), ("W1", (16, 16)), ("W2", (16, 16)))
    body = helper.make_function("local", "Linear", ["a", "b"], ["c"], [helper.make_node("MatMul", ["a", "b"], ["c"])],
                                [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm"),
             helper.make_node("Linear", ["h", "W2"], ["y"], domain="local", name="linear")]
    return _save(d / "local_function.onnx", nodes, inits, [4, 16], [4, 16], [body], ["local"]), []


def _weight_first(d: Path) -> tuple[Path, list[str] | None]:
    inits = _weights(np.random.default_rng(2), ("W1", (16, 16)), ("W2", (16, 16)))
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
             helper.make_node("MatMul", ["W2", "h"], ["y"], name="mm2")]
    return _save(d / "weight_first.onnx", nodes, inits, [16, 16], [16, 16]), ["mm2"]


def _quantized(fp32: Path, exclude: list[str] | None, out: Path) -> Path:
    """quantize_static (QDQ, uint8 activations). ``exclude`` None: of the graph ORT's pre-processing hands
    it, fp32 saved by ORT at level basic (U @ V folded, as quant_pre_process does); else of the file as
    written (a local function stays a call, which quantize_static leaves alone)."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    source = fp32
    if exclude is None:
        source = out.with_suffix(".basic.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(source)
        ort.InferenceSession(str(fp32), so, providers=["CPUExecutionProvider"])
    shape = [d.dim_value for d in onnx.load(str(fp32)).graph.input[0].type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(3)
            self.it = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(source), str(out), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, nodes_to_exclude=exclude or [])
    return out


def _counted(saved: Path) -> float | None:
    ops = [n.op_type for n in onnx.load(str(saved)).graph.node]
    int8, flt = sum(op in _INT8 for op in ops), sum(op in _FLOAT for op in ops)
    return int8 / (int8 + flt) if int8 + flt else None


@pytest.mark.parametrize("build, at_all", [(_u_at_v, 1.0), (_local_function, 0.5), (_weight_first, 0.5)],
                         ids=["a U@V weight ORT folds", "a MatMul in a local function", "MatMul(W, x) left in float"])
def test_int8_coverage_is_the_count_in_orts_saved_graph_in_levels_and_advice(tmp_path, build, at_all):
    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.runtime.levels import LevelsInput, LevelsRun, analyze_levels
    from service.pipeline.advice.advice import AdviceContext, Candidate, advice_plan

    fp32, exclude = build(tmp_path)
    qdq = _quantized(fp32, exclude, tmp_path / f"{fp32.stem}.qdq.onnx")
    shape = [d.dim_value for d in onnx.load(str(fp32)).graph.input[0].type.tensor_type.shape.dim]
    feeds = [{"x": np.random.default_rng(4).standard_normal(shape).astype(np.float32)}]
    paths = {"fp32": fp32, "ort_qdq": qdq}
    out = tmp_path / "levels"
    levels = analyze_levels(LevelsInput(artifact_paths=paths, eval_feeds=feeds,
                                        options=ComparisonOptions(latency={"enabled": False})), LevelsRun(out_dir=out))
    for name, per_level in levels.optimized.items():
        for level, ol in per_level.items():
            assert ol.error is None and ol.int8_coverage == _counted(out / ol.file), (name, level, ol.op_histogram)
    assert levels.optimized["ort_qdq"]["all"].int8_coverage == at_all

    # Advice's "before" (measured here, no levels figure given) and "after" (a session switch that changes
    # nothing ORT writes) read the same graph at 'all': the same count.
    ctx = AdviceContext(artifact_paths=paths, ort_input=fp32, ort_settings=resolved_ort_settings(ComparisonOptions()),
                        calibration=feeds, evaluation=feeds, input_names=["x"], calibration_cache=None,
                        budget_seconds=60)
    plan = advice_plan([Candidate("ort_qdq", {"session": {"session.intra_op.allow_spinning": "0"}}, "a switch")], ctx)
    plan.work()
    (made,) = plan.ready
    assert made.before.int8_coverage == made.after.int8_coverage == at_all
