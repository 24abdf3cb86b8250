"""Convs that read one bias initializer: ORT's quantizers write one quantized bias per name, where
each Conv needs its own (scale = its input scale x its weight scale). Pinned in the installed ORT,
on three Convs that share a bias, with the fixup's copy per reader as the changed condition:

- QOperator: every QLinearConv reads the same int32 bias, quantized with one reader's scale, so the
  others add a wrong bias and the file loses accuracy that QDQ keeps;
- QDQ: every Conv reads the last copy's DequantizeLinear; ORT's Conv fusion refuses a bias scale
  that is not input x weight scale, so only one Conv becomes a QLinearConv.

With a copy each (``ort_fixups.shared_biases_copied``) both formats quantize every Conv right. The
blocker ``bias_scale_mismatch`` names the condition for files that arrive that way."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

CONVS = 3
SHAPE = (1, 3, 8, 8)


class _Reader(CalibrationDataReader):
    def __init__(self):
        self._d = [{"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32) * (i + 1)} for i in range(4)]

    def get_next(self):
        return self._d.pop() if self._d else None


def _convs_sharing_a_bias(path) -> None:
    """CONVS Conv -> Sigmoid blocks whose Convs read the bias 'b'; each weight has another range, so
    each Conv's bias scale differs."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(4) * 0.5).astype(np.float32), "b")]
    nodes, prev = [], "x"
    for i in range(CONVS):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((4, 3 if i == 0 else 4, 3, 3)) * 0.3 * (i + 1)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [prev, f"w{i}", "b"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"])]
        prev = f"s{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def _sqnr(ref, got) -> float:
    return float(10 * np.log10((ref ** 2).sum() / ((ref - got) ** 2).sum()))


def _convs_at_extended(path, tmp_path) -> Counter:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "extended.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return Counter(n.op_type for n in onnx.load(str(tmp_path / "extended.onnx")).graph.node if "Conv" in n.op_type)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """{(copies, format): (quantized file, SQNR vs fp32 at ORT's default level)}."""
    from service.pipeline.quantize.ort_fixups import fixed_for_ort_quantizer

    tmp = tmp_path_factory.mktemp("shared_bias")
    raw = tmp / "shared.onnx"
    _convs_sharing_a_bias(raw)
    fixed, note = fixed_for_ort_quantizer(raw, tmp / "copied.onnx")
    assert fixed != raw and f"given one copy per reader ({CONVS - 1} copies)" in note
    feed = {"x": np.random.default_rng(9).standard_normal(SHAPE).astype(np.float32)}
    ref = ort.InferenceSession(str(raw), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(  # the copies change nothing fp32 computes
        ort.InferenceSession(str(fixed), providers=["CPUExecutionProvider"]).run(None, feed)[0], ref)
    out = {}
    for copies, source in ((False, raw), (True, fixed)):
        for fmt in (QuantFormat.QDQ, QuantFormat.QOperator):
            path = tmp / f"{copies}_{fmt.name}.onnx"
            quantize_static(str(source), str(path), _Reader(), quant_format=fmt, per_channel=False,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
            got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
            out[(copies, fmt.name)] = (path, _sqnr(ref, got))
    return out


def test_qoperator_adds_one_reader_s_bias_to_every_conv_until_each_has_its_own(quantized):
    (shared_path, shared_db), (_, copied_db) = quantized[(False, "QOperator")], quantized[(True, "QOperator")]
    biases = [n.input[8] for n in onnx.load(str(shared_path)).graph.node if n.op_type == "QLinearConv"]
    assert len(biases) == CONVS and len(set(biases)) == 1  # one int32 bias for three scales
    qdq_db = quantized[(False, "QDQ")][1]
    assert shared_db < qdq_db - 10, (shared_db, qdq_db)  # measured 16.7 vs 41.2 dB
    assert copied_db > qdq_db - 3, (copied_db, qdq_db)


def test_qdq_fuses_one_conv_of_a_shared_bias_until_each_has_its_own(quantized, tmp_path):
    shared_path, _ = quantized[(False, "QDQ")]
    model = onnx.load(str(shared_path))
    assert len({n.input[2] for n in model.graph.node if n.op_type == "Conv"}) == 1  # every Conv: the last copy
    assert _convs_at_extended(shared_path, tmp_path) == Counter({"Conv": CONVS - 1, "QLinearConv": 1})
    assert _convs_at_extended(quantized[(True, "QDQ")][0], tmp_path) == Counter({"QLinearConv": CONVS})


def _gemm_bias_also_added(path) -> None:
    """Gemm(x, W, b) -> Relu -> Add(., b): ALBERT's shared layer once quant_pre_process fused one of its
    MatMul + Add into a Gemm (sudachi-b-imitator: query.bias read by 1 Gemm and 3 Adds)."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["g"], name="gemm"), helper.make_node("Relu", ["g"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.mark.parametrize("copied", [False, True], ids=["as-is", "fixed-for-ort"])
def test_a_bias_an_add_also_reads_gets_a_copy_for_the_gemm(tmp_path, copied):
    """ORT's QOperator quantizer writes the Gemm's bias as int32 'b_quantized' and feeds the QLinearAdd
    that very tensor: ORT refused the file (ort_file_rejected) at every level."""
    from service.pipeline.quantize.ort_fixups import shared_biases_copied

    _gemm_bias_also_added(tmp_path / "m.onnx")
    src = tmp_path / "m.onnx"
    if copied:
        model = onnx.load(str(src))
        assert shared_biases_copied(model) == {"b": 1}
        gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
        assert gemm.input[2] != "b" and next(n for n in model.graph.node if n.op_type == "Add").input[1] == "b"
        src = tmp_path / "fixed.onnx"
        onnx.save(model, str(src))
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 8)).astype(np.float32)} for i in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "q.onnx"
    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=False)
    try:
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        loads = True
    except Exception:  # noqa: BLE001 - the oracle is whether ORT takes its own quantizer's file
        loads = False
    assert loads == copied
