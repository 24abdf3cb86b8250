"""Each blocker code, pinned against the installed ORT: a minimal QDQ model where changing that
one condition changes what ORT fuses. The oracle is ORT's own saved graph (which op it wrote), the
code under test only has to name the condition."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.environment import cpu_info
from service.pipeline.vocabulary import graph_from_path
from service.pipeline.inspect.blockers import BLOCKERS, grouped_blockers, unfused_by_level, unfused_nodes
from service.pipeline.ort.sessions import session_options_for
from service.pipeline.ort.targets import host_platform, int8_allowed_in
from tests import models

X86 = cpu_info().arch not in ("aarch64", "arm64", "ARM64")
DT = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "int32": TensorProto.INT32,
      "uint16": TensorProto.UINT16, "int16": TensorProto.INT16}
NP = {"uint8": np.uint8, "int8": np.int8, "int32": np.int32, "uint16": np.uint16, "int16": np.int16}


class Builder:
    """A graph of float inputs, Q/DQ pairs and one target node, written as ORT's quantizers write them."""

    def __init__(self, opset: int = 17):
        self.nodes, self.inits, self.outputs = [], [], []
        self.inputs = []
        self.opset = opset
        self._n = 0

    def name(self, p):
        self._n += 1
        return f"{p}{self._n}"

    def const(self, arr, name=None):
        name = name or self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def input(self, name, shape):
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def q(self, x, dtype="uint8", scale=0.05, zp=None):
        zp = (128 if dtype == "uint8" else 0) if zp is None else zp
        s, z = self.const(np.float32(scale)), self.const(NP[dtype](zp))
        out = self.name(f"{x}_q")
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [out], name=self.name("Q")))
        return out

    def dq(self, xq, dtype="uint8", scale=0.05, zp=None, name=None):
        zp = (128 if dtype == "uint8" else 0) if zp is None else zp
        s, z = self.const(np.float32(scale)), self.const(NP[dtype](zp))
        out = self.name(f"{xq}_dq")
        self.nodes.append(helper.make_node("DequantizeLinear", [xq, s, z], [out], name=name or self.name("DQ")))
        return out

    def qdq(self, x, dtype="uint8", scale=0.05, readers=1, zp=None):
        xq = self.q(x, dtype, scale, zp)
        return [self.dq(xq, dtype, scale, zp) for _ in range(readers)]

    def weight(self, shape, dtype="int8", scale=0.02):
        w = self.const(np.random.default_rng(0).integers(-20, 20, shape).astype(NP[dtype]))
        return self.dq(w, dtype, scale, zp=0)

    def bias(self, n, dtype="int32", scale=0.001):
        b = self.const(np.arange(n).astype(NP[dtype]))
        return self.dq(b, dtype, scale, zp=0)

    def node(self, op, inputs, name, **attrs):
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def output(self, x):
        vi = onnx.ValueInfoProto(name=x)
        vi.type.tensor_type.elem_type = TensorProto.FLOAT
        self.outputs.append(vi)

    def save(self, path):
        m = models.from_nodes(self.nodes, self.inputs, self.outputs, self.inits, opset=self.opset,
                              ir=8 if self.opset < 21 else 10)
        onnx.save(m, str(path))
        return path


def saved(path, level="extended", tmp=None, **config):
    """ORT's saved graph for ``path`` at ``level`` (the oracle), its session config entries ``config`` set as a
    job's options.ort_session sets them, and this module's rows for it under the int8 rule they give."""
    import onnxruntime as ort

    out = path.with_suffix(f".{level}.onnx")
    so = session_options_for(level, optimized_model_path=out, session_config=config)
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    g = graph_from_path(out)
    allowed = int8_allowed_in(config, host_platform().int8_allowed)
    return g, {r.node: r for r in unfused_nodes(g, level=level, int8_allowed=allowed)}


def ops(g) -> set[str]:
    return {n.op_type for n in g.nodes}


def conv_model(tmp_path, name="m", *, in_dtype="uint8", out_dtype="uint8", in_readers=1, out_readers=1,
               bias_dtype="int32", weight_dtype="int8", with_q=True, output_too=False, opset=17, dq_out=False,
               bias_scale=0.001):
    """x -> Q -> DQ -> Conv(W, B) -> Q -> DQ (x out_readers) -> outputs."""
    b = Builder(opset)
    x = b.input("x", [1, 4, 8, 8])
    dqs = b.qdq(x, in_dtype, readers=in_readers)
    if dq_out:
        b.output(dqs[0])
    for extra in dqs[1:]:
        b.output(b.node("Relu", [extra], b.name("other")))
    inputs = [dqs[0], b.weight([4, 4, 3, 3], weight_dtype)]
    if bias_dtype:
        inputs.append(b.bias(4, bias_dtype, scale=bias_scale))
    y = b.node("Conv", inputs, "conv", pads=[1, 1, 1, 1])
    if output_too:
        b.output(y)
    if with_q:
        for d in b.qdq(y, out_dtype, readers=out_readers):
            b.output(b.node("Sigmoid", [d], b.name("tail")))
    else:
        b.output(b.node("Sigmoid", [y], "tail"))
    return b.save(tmp_path / f"{name}.onnx")


def test_the_table_has_the_codes_the_issue_names():
    for code in ("io_dtype_mismatch", "int8_activation_on_x86", "fusion_starts_at_extended", "no_qdq_in_file",
                 "no_q_on_output", "bias_not_int32", "no_qdq_rule"):
        assert code in BLOCKERS and BLOCKERS[code].fix


def test_uint8_conv_fuses_and_has_no_row(tmp_path):
    g, rows = saved(conv_model(tmp_path))
    assert "QLinearConv" in ops(g) and "conv" not in rows


def test_no_qdq_in_file(tmp_path):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    w = b.const(np.ones([4, 4, 3, 3], np.float32))
    b.output(b.node("Conv", [x, w], "conv", pads=[1, 1, 1, 1]))
    g, rows = saved(b.save(tmp_path / "f.onnx"))
    assert "Conv" in ops(g) and rows["conv"].blocker == "no_qdq_in_file"


@pytest.mark.parametrize("op, code", [("Add", "no_qdq_in_file"), ("Sub", "no_int8_form"), ("Relu", "no_qdq_in_file")])
def test_an_op_without_qdq_is_told_apart_by_whether_quantizing_it_helps(tmp_path, op, code):
    """No Q/DQ around it: quantizing an Add gives a QLinearAdd (test_no_qdq_rule), a Relu is removed
    by the QuantizeLinear after it; a Sub has no rule, so the advice "quantize this op" would not help."""
    b = Builder()
    x = b.input("x", [1, 4])
    b.output(b.node(op, [x] if op == "Relu" else [x, x], "op"))
    g, rows = saved(b.save(tmp_path / f"{op}.onnx"))
    assert op in ops(g) and rows["op"].blocker == code


def test_a_relu_before_a_quantize_linear_is_removed(tmp_path):
    """The pin for _ABSORBED_BY_Q: Relu -> QuantizeLinear whose zero point is the dtype's minimum (the
    clamp Relu does) loses the Relu at extended (ReluQuantFusion, registered as ReluQuantRewrite), with or without a Q/DQ before it."""
    b = Builder()
    x = b.input("x", [1, 4])
    b.output(b.qdq(b.node("Relu", [x], "op"), zp=0)[0])
    g, _ = saved(b.save(tmp_path / "relu_q.onnx"), level="extended")
    assert "Relu" not in ops(g)


@pytest.mark.parametrize("op, fused", [("Add", True), ("Sub", False)], ids=["Add has a rule", "Sub has none"])
def test_no_qdq_rule(tmp_path, op, fused):
    b = Builder()
    x, y = b.input("x", [1, 4]), b.input("y", [1, 4])
    z = b.node(op, [b.qdq(x)[0], b.qdq(y)[0]], "bin")
    b.output(b.qdq(z)[0])
    g, rows = saved(b.save(tmp_path / f"{op}.onnx"))
    assert ("QLinearAdd" in ops(g)) == fused
    assert ("bin" in rows) == (not fused)
    if not fused:
        assert rows["bin"].blocker == "no_qdq_rule"


@pytest.mark.parametrize("opset", [11, 21, 22], ids=["MaxPool-11", "MaxPool-12", "MaxPool-22"])
def test_maxpool_qdq_is_dropped_for_the_registered_versions(tmp_path, opset):
    """qdq_selector_action_transformer.cc registers {"MaxPool", {12, 22}} (PR 29201): an opset-21 model's MaxPool
    is MaxPool-12, an opset-22 one MaxPool-22, both dropped; MaxPool-11 keeps its Q/DQ."""
    b = Builder(opset)
    x = b.input("x", [1, 4, 8, 8])
    y = b.node("MaxPool", [b.qdq(x)[0]], "pool", kernel_shape=[2, 2])
    b.output(b.node("Sigmoid", [b.qdq(y)[0]], "tail"))
    g, rows = saved(b.save(tmp_path / f"mp{opset}.onnx"))
    pool = next(n for n in g.nodes if n.op_type == "MaxPool")
    dropped = g.producer[pool.input[0]].op_type == "QuantizeLinear"
    assert dropped == (opset >= 12)
    if dropped:
        assert "pool" not in rows
    else:
        assert rows["pool"].blocker == "no_qdq_rule" and "MaxPool-11" in rows["pool"].detail


@pytest.mark.parametrize("level, fused", [("basic", False), ("extended", True)])
def test_fusion_starts_at_extended(tmp_path, level, fused):
    g, rows = saved(conv_model(tmp_path), level)
    assert ("QLinearConv" in ops(g)) == fused
    if not fused:
        assert rows["conv"].blocker == "fusion_starts_at_extended"


@pytest.mark.parametrize("both", [True, False], ids=["both inputs DQ", "one float input"])
def test_input_not_quantized(tmp_path, both):
    b = Builder()
    x, y = b.input("x", [1, 4]), b.input("y", [1, 4])
    z = b.node("Add", [b.qdq(x)[0], b.qdq(y)[0] if both else y], "add")
    b.output(b.qdq(z)[0])
    g, rows = saved(b.save(tmp_path / "a.onnx"))
    assert ("QLinearAdd" in ops(g)) == both
    if not both:
        assert rows["add"].blocker == "input_not_quantized"


@pytest.mark.parametrize("dq_out", [False, True], ids=["DQ read by the Conv only", "DQ also a graph output"])
def test_a_shared_dq_is_no_blocker_ensure_unique_dq_copies_it(tmp_path, dq_out):
    """EnsureUniqueDQForNodeUnit gives the Conv its own DQ even when the DQ is a graph output."""
    g, rows = saved(conv_model(tmp_path, dq_out=dq_out))
    assert "QLinearConv" in ops(g) and "conv" not in rows


@pytest.mark.parametrize("with_q", [True, False])
def test_no_q_on_output(tmp_path, with_q):
    g, rows = saved(conv_model(tmp_path, with_q=with_q))
    assert ("QLinearConv" in ops(g)) == with_q
    if not with_q:
        assert rows["conv"].blocker == "no_q_on_output"


@pytest.mark.parametrize("two_q", [False, True], ids=["one QuantizeLinear", "two (other scales: CSE keeps both)"])
def test_output_quantized_twice(tmp_path, two_q):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.node("Conv", [b.qdq(x)[0], b.weight([4, 4, 3, 3]), b.bias(4)], "conv", pads=[1, 1, 1, 1])
    b.output(b.node("Sigmoid", [b.qdq(y)[0]], "t1"))
    if two_q:
        b.output(b.node("Sigmoid", [b.qdq(y, scale=0.1)[0]], "t2"))
    g, rows = saved(b.save(tmp_path / "q2.onnx"))
    assert ("QLinearConv" in ops(g)) == (not two_q)
    if two_q:
        assert rows["conv"].blocker == "output_quantized_twice"


@pytest.mark.parametrize("output_too", [False, True])
def test_output_is_graph_output(tmp_path, output_too):
    g, rows = saved(conv_model(tmp_path, output_too=output_too))
    assert ("QLinearConv" in ops(g)) == (not output_too)
    if output_too:
        assert rows["conv"].blocker == "output_is_graph_output"


@pytest.mark.skipif(not X86, reason="QDQS8ToU8Transformer runs only where QDQIsInt8Allowed() is false")
@pytest.mark.parametrize("out_readers", [1, 2], ids=["int8 output read once becomes uint8",
                                                     "int8 output read twice stays int8"])
def test_io_dtype_mismatch(tmp_path, out_readers):
    g, rows = saved(conv_model(tmp_path, out_dtype="int8", out_readers=out_readers))
    assert ("QLinearConv" in ops(g)) == (out_readers == 1)
    if out_readers == 2:
        r = rows["conv"]
        assert r.blocker == "io_dtype_mismatch"
        assert "input uint8" in r.detail and "output int8 (read by 2 nodes" in r.detail


@pytest.mark.skipif(not X86, reason="on ARM QDQIsInt8Allowed() is true")
@pytest.mark.parametrize("entry", [None, "0", "1"], ids=["x86 default", "qdqisint8allowed=0", "qdqisint8allowed=1"])
def test_int8_activation_on_x86(tmp_path, entry):
    """The one entry options.ort_session allows changes what the installed ORT makes of a QDQ Conv with int8
    activations: unset or "0" (ORT's default on x86, QDQIsInt8Allowed() false) the Conv stays float between its
    Q/DQ, "1" fuses it to QLinearConv; ``int8_allowed_in`` reads the entry as ORT does."""
    path = conv_model(tmp_path, in_dtype="int8", out_dtype="int8", in_readers=2, out_readers=2)
    config = {} if entry is None else {"session.qdqisint8allowed": entry}
    int8_allowed = entry == "1"
    assert int8_allowed_in(config, host_platform().int8_allowed) == int8_allowed
    g, rows = saved(path, **config)
    assert ("QLinearConv" in ops(g)) == int8_allowed
    if not int8_allowed:
        assert rows["conv"].blocker == "int8_activation_on_x86"


@pytest.mark.parametrize("weight", ["int8", "uint8"])
def test_weight_dtype_mismatch(tmp_path, weight):
    path = conv_model(tmp_path, in_dtype="int8", out_dtype="int8", in_readers=2, out_readers=2, weight_dtype=weight)
    g, rows = saved(path, **{"session.qdqisint8allowed": "1"})
    assert ("QLinearConv" in ops(g)) == (weight == "int8")
    if weight == "uint8":
        assert rows["conv"].blocker == "weight_dtype_mismatch"


@pytest.mark.parametrize("bias", ["int32", "int8"])
def test_bias_not_int32(tmp_path, bias):
    g, rows = saved(conv_model(tmp_path, bias_dtype=bias))
    assert ("QLinearConv" in ops(g)) == (bias == "int32")
    if bias != "int32":
        assert rows["conv"].blocker == "bias_not_int32"


@pytest.mark.parametrize("factor, fused", [(1.0, True), (1.009, True), (0.991, True), (1.013, False), (0.987, False),
                                           (1.5, False)])
def test_bias_scale_mismatch(tmp_path, factor, fused):
    """input scale 0.05 x weight scale 0.02 = 1e-3: ORT 1.32 fuses a bias scale within 1e-2 x 1e-3 + 1e-6
    (1.1%) of it, on either side, and no further (BIAS_SCALE_RTOL, BIAS_SCALE_ATOL)."""
    g, rows = saved(conv_model(tmp_path, bias_scale=0.001 * factor))
    assert ("QLinearConv" in ops(g)) == fused
    assert (rows.get("conv") and rows["conv"].blocker) == (None if fused else "bias_scale_mismatch")


@pytest.mark.parametrize("zero_point", [0, 3])
def test_bias_zero_point_nonzero(tmp_path, zero_point):
    """CheckConvBiasScale (qdq_selectors.cc, PR 28229) also requires the bias DequantizeLinear's zero point to be
    absent or a constant int32 0: QLinearConv reads its bias with an implied zero point of 0."""
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    bias = b.dq(b.const(np.arange(4).astype(np.int32)), "int32", scale=0.001, zp=zero_point)
    y = b.node("Conv", [b.qdq(x)[0], b.weight([4, 4, 3, 3]), bias], "conv", pads=[1, 1, 1, 1])
    b.output(b.node("Sigmoid", [b.qdq(y)[0]], "tail"))
    g, rows = saved(b.save(tmp_path / f"bzp{zero_point}.onnx"))
    assert ("QLinearConv" in ops(g)) == (zero_point == 0)
    assert (rows.get("conv") and rows["conv"].blocker) == (None if zero_point == 0 else "bias_zero_point_nonzero")


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_gemm_beta_not_one(tmp_path, beta):
    """GemmNodeGroupSelector::Check (qdq_selectors.cc): with a bias DequantizeLinear, beta must be 1.0 (tested
    before the bias dtype); QGemm adds the int32 bias as it is."""
    b = Builder()
    x = b.input("x", [2, 8])
    y = b.node("Gemm", [b.qdq(x)[0], b.weight([8, 4]), b.bias(4)], "gemm", beta=beta)
    b.output(b.node("Sigmoid", [b.qdq(y)[0]], "tail"))
    g, rows = saved(b.save(tmp_path / f"gemm{beta}.onnx"))
    assert ("QGemm" in ops(g)) == (beta == 1.0)
    assert (rows.get("gemm") and rows["gemm"].blocker) == (None if beta == 1.0 else "gemm_beta_not_one")


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_int16_not_supported(tmp_path, dtype):
    g, rows = saved(conv_model(tmp_path, in_dtype=dtype, out_dtype=dtype, opset=21))
    assert ("QLinearConv" in ops(g)) == (dtype == "uint8")
    if dtype == "uint16":
        assert rows["conv"].blocker == "int16_not_supported"


@pytest.mark.parametrize("out_scale", [0.05, 0.1], ids=["same scale: Q/DQ dropped", "other scale: kept"])
def test_qdq_params_differ(tmp_path, out_scale):
    b = Builder()
    x = b.input("x", [1, 4, 4])
    y = b.node("Reshape", [b.qdq(x)[0], b.const(np.array([1, 16], np.int64))], "reshape")
    b.output(b.node("Sigmoid", [b.qdq(y, scale=out_scale)[0]], "tail"))
    g, rows = saved(b.save(tmp_path / "r.onnx"))
    reshape = next(n for n in g.nodes if n.op_type == "Reshape")
    on_float = g.producer.get(reshape.input[0]) is not None and \
        g.producer[reshape.input[0]].op_type == "DequantizeLinear"
    assert on_float == (out_scale != 0.05)
    if on_float:
        assert rows["reshape"].blocker == "qdq_params_differ"


def resize_model(tmp_path, name, *, mode="nearest", ctm="half_pixel", dtype="uint8", out_scale=0.05, roi=False):
    """x -> Q -> DQ -> Resize(sizes 2x) -> Q -> DQ -> Sigmoid; ``mode=None`` leaves the attribute out."""
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    empty = b.const(np.array([], np.float32))
    rois = b.const(np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32)) if roi else empty
    attrs = {"coordinate_transformation_mode": ctm} | ({"mode": mode} if mode else {})
    y = b.node("Resize", [b.qdq(x, dtype)[0], rois, empty, b.const(np.array([1, 4, 16, 16], np.int64))], "resize",
               **attrs)
    b.output(b.node("Sigmoid", [b.qdq(y, dtype, scale=out_scale)[0]], "tail"))
    return b.save(tmp_path / f"{name}.onnx")


def resize_on_float(g) -> bool:
    """The oracle: ORT left a float Resize between a DequantizeLinear and a QuantizeLinear."""
    resize = next(n for n in g.nodes if n.op_type == "Resize")
    return g.producer[resize.input[0]].op_type == "DequantizeLinear"


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("mode", [None, "nearest", "linear", "cubic"], ids=["mode absent", "nearest", "linear", "cubic"])
def test_resize_not_nearest(tmp_path, mode, dtype):
    """qdq_selectors.cc, DropQDQNodeGroupSelector::Check (ORT 1.32, PR 28414): a Resize whose 'mode' is present
    and not "nearest" keeps its Q/DQ; an absent mode is ONNX's default, nearest, and drops them. int8 or uint8
    makes no difference (on x86 QDQS8ToU8Transformer turns the int8 pairs to uint8 first). u2netp (rembg): 38
    linear Resizes between equal uint8 Q/DQ stayed float, rows read 'unexplained'."""
    g, rows = saved(resize_model(tmp_path, f"rs_{mode}_{dtype}", mode=mode, dtype=dtype))
    on_float = mode in ("linear", "cubic")
    assert resize_on_float(g) == on_float
    assert (rows.get("resize") and rows["resize"].blocker) == ("resize_not_nearest" if on_float else None)


@pytest.mark.parametrize("ctm", ["half_pixel", "tf_crop_and_resize"])
def test_resize_tf_crop_and_resize(tmp_path, ctm):
    """The same check's second Resize condition (compiled into the 1.32.0 wheel right after the mode test): a
    nearest Resize with coordinate_transformation_mode 'tf_crop_and_resize' keeps its Q/DQ; only the mode
    changes here (the roi is given in both, half_pixel ignores it)."""
    g, rows = saved(resize_model(tmp_path, f"rs_{ctm}", ctm=ctm, roi=True))
    on_float = ctm == "tf_crop_and_resize"
    assert resize_on_float(g) == on_float
    assert (rows.get("resize") and rows["resize"].blocker) == ("resize_tf_crop_and_resize" if on_float else None)


@pytest.mark.parametrize("mode, code", [("nearest", "qdq_params_differ"), ("linear", "resize_not_nearest")])
def test_a_resize_is_asked_its_mode_before_its_scales(tmp_path, mode, code):
    """DropQDQNodeGroupSelector::Check tests a Resize's attributes before IsQDQPairSupported: with the output
    scale differing too, a linear Resize reads resize_not_nearest (changing the scale alone would not fuse it)."""
    g, rows = saved(resize_model(tmp_path, f"rs_scale_{mode}", mode=mode, out_scale=0.1))
    assert resize_on_float(g)
    assert rows["resize"].blocker == code


@pytest.mark.parametrize("scale", [0.05, -0.05])
def test_scale_not_positive(tmp_path, scale):
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.node("MaxPool", [b.qdq(x, scale=scale)[0]], "pool", kernel_shape=[2, 2])
    b.output(b.node("Sigmoid", [b.qdq(y, scale=scale)[0]], "tail"))
    g, rows = saved(b.save(tmp_path / "mpn.onnx"))
    pool = next(n for n in g.nodes if n.op_type == "MaxPool")
    on_float = g.producer[pool.input[0]].op_type == "DequantizeLinear" if pool.input[0] in g.producer else False
    assert on_float == (scale < 0)
    if on_float:
        assert rows["pool"].blocker == "scale_not_positive"


def test_grouping_counts_nodes_per_op_and_reason(tmp_path):
    _, rows = saved(conv_model(tmp_path, out_dtype="int8", out_readers=2))
    groups = grouped_blockers([r for r in rows.values() if r.op_type == "Conv"])
    assert groups[0][:3] == (1, "Conv", "io_dtype_mismatch")
    assert "output read by 2 nodes stays int8" in groups[0][3]


def test_xnnpack_static_ops_are_the_ones_the_blocker_names():
    """The title of not_in_xnnpack_config lists these patterns: the installed torchao's list."""
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer

    assert XNNPACKQuantizer.STATIC_OPS == ["linear_relu", "linear", "conv_relu", "conv", "conv_transpose_relu",
                                           "adaptive_avg_pool2d", "gru_io_only", "add_relu", "add", "mul_relu",
                                           "mul", "cat"]
    assert "not_in_xnnpack_config" in BLOCKERS and "conv_transpose" not in XNNPACKQuantizer.STATIC_OPS


def _pt2e_rows(tmp_path, nodes, feeds, inits, out_shape):
    """The PT2E file of a small ONNX upload (the job's converter and XNNPACK config), its rows at extended."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "quantize" / "pt2e_from_onnx"))
    from pt2e_upload import pt2e_of_upload

    onnx.save(models.from_nodes(nodes, list(feeds.items()), [("y", out_shape)], inits), str(tmp_path / "up.onnx"))
    pt2e_of_upload(tmp_path / "up.onnx", tmp_path / "pt2e.onnx", calibration_samples=2, eval_samples=1)
    g, _ = saved(tmp_path / "pt2e.onnx")
    rows = unfused_nodes(g, level="extended", int8_allowed=False, pt2e=True)
    return {r.op_type: r for r in rows}


@pytest.mark.parametrize("relu", [False, True], ids=["alone: float", "before a Relu: quantized"])
def test_a_lone_conv_transpose_is_not_in_the_xnnpack_config(tmp_path, relu):
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["t" if relu else "y"], strides=[2, 2])]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    rows = _pt2e_rows(tmp_path, nodes, {"x": [1, 4, 8, 8]}, {"w": w}, [1, 3, 17, 17])
    if relu:
        assert "ConvTranspose" not in rows or rows["ConvTranspose"].blocker != "not_in_xnnpack_config"
    else:
        assert rows["ConvTranspose"].blocker == "not_in_xnnpack_config"
        assert "conv_transpose_relu" in rows["ConvTranspose"].detail


@pytest.mark.parametrize("relu", [False, True], ids=["alone: float", "before a Relu: quantized"])
def test_a_lone_conv3d_is_not_in_the_xnnpack_config(tmp_path, relu):
    """A 3-D convolution PT2E left float read "no_qdq_in_file" (quantize it: nothing to act on). torchao's
    'conv' annotator takes aten.conv1d/conv2d only; 'conv_relu' takes conv3d too, before a Relu."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["t" if relu else "y"], pads=[1] * 6)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    rows = _pt2e_rows(tmp_path, nodes, {"x": [1, 3, 4, 6, 6]}, {"w": w}, [1, 4, 4, 6, 6])
    if relu:
        assert "Conv" not in rows or rows["Conv"].blocker != "not_in_xnnpack_config"
    else:
        assert rows["Conv"].blocker == "not_in_xnnpack_config"
        assert "3-D convolution" in rows["Conv"].detail and "conv1d and conv2d only" in rows["Conv"].detail


def test_a_matmul_of_two_activations_is_not_in_the_xnnpack_config(tmp_path):
    rows = _pt2e_rows(tmp_path, [helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": [1, 4, 8], "b": [1, 8, 4]}, {},
                      [1, 4, 4])
    assert rows["MatMul"].blocker == "not_in_xnnpack_config" and "two activations" in rows["MatMul"].detail


PINNED = {"not_in_xnnpack_config", "no_int8_form", "output_quantized_twice", "no_qdq_in_file", "no_qdq_rule", "fusion_starts_at_extended", "input_not_quantized", "no_q_on_output",
          "output_is_graph_output", "io_dtype_mismatch", "int8_activation_on_x86", "weight_dtype_mismatch",
          "bias_not_int32", "bias_scale_mismatch", "int16_not_supported", "qdq_params_differ", "scale_not_positive",
          "resize_not_nearest", "resize_tf_crop_and_resize", "bias_zero_point_nonzero", "gemm_beta_not_one", "inserted_by_layout",
          "float_tail"}  # float_tail: tests/pipeline/runtime/test_data_dependent_outputs.py (the PT2E tail after NMS)


def residual_model(tmp_path, dtype):
    """Conv -> Relu -> (Conv -> Add, Add) -> Conv: the Relu's output has two readers, so on x86 its int8
    Q/DQ stay int8 (QDQS8ToU8 converts single-reader pairs only) and the second Conv and the Add stay float."""
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.node("Conv", [b.qdq(x, dtype)[0], b.weight([4, 4, 3, 3]), b.bias(4)], "c1", pads=[1, 1, 1, 1])
    r1, r2 = b.qdq(b.node("Relu", [b.qdq(y, dtype)[0]], "relu"), dtype, readers=2)
    y2 = b.node("Conv", [r1, b.weight([4, 4, 3, 3]), b.bias(4)], "c2", pads=[1, 1, 1, 1])
    s = b.node("Add", [b.qdq(y2, dtype)[0], r2], "add")
    s = b.node("Conv", [b.qdq(s, dtype)[0], b.weight([4, 4, 3, 3]), b.bias(4)], "c3", pads=[1, 1, 1, 1])
    b.output(b.node("Sigmoid", [b.qdq(s, dtype)[0]], "tail"))
    return b.save(tmp_path / f"residual_{dtype}.onnx")


def _float_transposes(g):
    return [n.name for n in g.nodes if n.op_type == "Transpose" and g.dtypes.get(n.input[0]) == "float32"]


@pytest.mark.skipif(not X86, reason="the int8 Q/DQ that keep the neighbours float are x86's (QDQS8ToU8)")
@pytest.mark.parametrize("nhwc", [True, False], ids=["NhwcTransformer", "NhwcTransformer-disabled"])
def test_a_float_transpose_only_the_layout_level_has_is_nhwc_transformers(tmp_path, nhwc):
    """yahoo open_nsfw at `layout`: 35 Transposes where `extended` had 4, the new ones between a
    DequantizeLinear and a QuantizeLinear, read "unexplained: Transpose selector (drop) conditions all
    hold". NhwcTransformer (Level3) wraps each channels-last QLinearConv in Transposes and pushes them;
    disabled, ORT writes no Transpose at all."""
    graphs = _levels(tmp_path, residual_model(tmp_path, "int8"), () if nhwc else ("NhwcTransformer",))
    assert not _float_transposes(graphs["extended"])
    added = _float_transposes(graphs["layout"])
    assert bool(added) == nhwc  # the oracle: ORT's own saved graph
    rows = {r.node: r for r in unfused_by_level(graphs, int8_allowed=False)["layout"]}
    for name in added:
        assert rows[name].blocker == "inserted_by_layout"
        assert rows[name].detail == "not in the extended graph: DequantizeLinear -> Transpose -> QuantizeLinear"
    assert not any(r.blocker == "unexplained" for r in rows.values())
    # The rows the extended graph had still read as they did there.
    assert rows["add"].blocker == rows["c2"].blocker == "io_dtype_mismatch"


def _levels(tmp_path, path, disabled=()):
    import onnxruntime as ort

    graphs = {}
    for level in ("extended", "layout"):
        out = tmp_path / f"{path.stem}.{level}.onnx"
        ort.InferenceSession(str(path), session_options_for(level, optimized_model_path=out),
                             providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled))
        graphs[level] = graph_from_path(out)
    return graphs


@pytest.mark.skipif(not X86, reason="uint8 vs int8 activations is x86's condition")
def test_with_uint8_activations_the_layout_transposes_stay_on_8_bit_data(tmp_path):
    """The blocker's fix: where the neighbours fuse (uint8 activations), NhwcTransformer's Transposes
    sit between int8 kernels and move uint8 tensors: no row."""
    graphs = _levels(tmp_path, residual_model(tmp_path, "uint8"))
    layout = graphs["layout"]
    assert any(n.op_type == "Transpose" for n in layout.nodes) and not _float_transposes(layout)
    assert not [r for r in unfused_by_level(graphs, int8_allowed=False)["layout"] if r.op_type == "Transpose"]


def test_every_code_in_the_table_is_pinned_by_a_test_above():
    assert set(BLOCKERS) - {"unexplained"} == PINNED


@pytest.mark.parametrize("level", ["basic", "extended"])
def test_relu_between_conv_and_q_shares_the_conv_units_fate(tmp_path, level):
    """PT2E writes Conv -> Relu -> Q: ORT's selector takes the Relu into the Conv's unit."""
    b = Builder()
    x = b.input("x", [1, 4, 8, 8])
    y = b.node("Conv", [b.qdq(x)[0], b.weight([4, 4, 3, 3]), b.bias(4)], "conv", pads=[1, 1, 1, 1])
    r = b.node("Relu", [y], "relu")
    b.output(b.node("Sigmoid", [b.qdq(r, zp=0)[0]], "tail"))
    g, rows = saved(b.save(tmp_path / "cr.onnx"), level)
    fused = "QLinearConv" in ops(g)
    assert fused == (level == "extended") and ("Relu" in ops(g)) == (not fused)
    if not fused:
        assert rows["relu"].blocker == rows["conv"].blocker == "fusion_starts_at_extended"
        assert "part of conv's unit" in rows["relu"].detail


def test_an_add_of_an_activation_and_an_int8_constant_groups_by_dtype(tmp_path):
    """PT2E writes a bias Add whose constant is an int8 DQ; QDQS8ToU8 turns the activation uint8, so
    ORT's QDQ Add sees two dtypes. The grouped line read "inputs uint8, _frozen_param0 mixed" (a
    tensor name where int8 belongs): one group per node instead of one per reason."""
    b = Builder()
    x = b.input("x", [1, 8])
    for k in range(2):
        y = b.node("Add", [b.qdq(x, "uint8")[0], b.weight([1, 8], "int8")], f"add{k}")
        for d in b.qdq(y, "uint8"):
            b.output(b.node("Sigmoid", [d], b.name("tail")))
    g, rows = saved(b.save(tmp_path / "adds.onnx"))
    assert {"add0", "add1"} <= set(rows)
    adds = [r for r in rows.values() if r.op_type == "Add"]
    assert all(r.blocker == "io_dtype_mismatch" and r.detail.startswith("inputs of different types") for r in adds)
    assert "Add" in ops(g)  # the oracle: ORT left both Adds in float
    groups = grouped_blockers(adds)
    assert [(count, phrase) for count, _, _, phrase, _ in groups] == [(2, "inputs int8 and uint8 mixed")]


def test_xnnpack_s_observer_sharing_ops_are_the_ones_the_blocker_takes_for_quantized():
    """XNNPACK_QUANTIZED_OPS lists, in ONNX words, STATIC_OPS and the ops that share their input's
    observer: the installed torchao's list."""
    import torch
    from torchao.testing.pt2e._xnnpack_quantizer_utils import _is_share_obs_or_fq_op

    aten = torch.ops.aten
    shared = [aten.relu.default, aten.hardtanh.default, aten.max_pool2d.default, aten.mean.dim, aten.permute.default,
              aten.squeeze.dim, aten.view.default, aten.slice_copy.Tensor, aten.flatten.using_ints]
    assert all(_is_share_obs_or_fq_op(op) for op in shared)
    assert not any(_is_share_obs_or_fq_op(op) for op in (aten.sigmoid.default, aten.tanh.default, aten.softmax.int))


@pytest.mark.parametrize("tail", ["Sigmoid", "Relu"])
def test_a_pt2e_op_without_a_pattern_after_a_quantized_one_is_not_in_the_xnnpack_config(tmp_path, tail):
    """madmom's chroma DNN: its output Sigmoid after a quantized MatMul read "no_q_on_output: quantize its
    output", a change the XNNPACK config cannot make (a Sigmoid that feeds a Conv gets a Q from the Conv's
    input annotation and fuses); a Relu there joins the Conv's unit."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node(tail, ["c"], ["y"])]
    rows = _pt2e_rows(tmp_path, nodes, {"x": [1, 3, 8, 8]}, {"w": w}, [1, 4, 8, 8])
    if tail == "Sigmoid":
        assert rows["Sigmoid"].blocker == "not_in_xnnpack_config" and "no pattern for Sigmoid" in rows["Sigmoid"].detail
    else:
        assert "Relu" not in rows
