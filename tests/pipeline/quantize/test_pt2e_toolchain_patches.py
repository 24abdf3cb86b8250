"""The conv-bn fold guard changes nothing torchao computes, only when it runs."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torchao.quantization.pt2e import quantize_pt2e  # noqa: E402
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402
from torchao.quantization.pt2e.utils import _is_bn_node  # noqa: E402
from torchao.testing.pt2e._xnnpack_quantizer import (  # noqa: E402
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)

from service.pipeline.quantize.toolchain_patches.pt2e import bn_after_conv, install_conv_bn_fold_guard  # noqa: E402


class _StandaloneBn(torch.nn.Module):
    """conv -> BN (prepare folds it) and conv + x -> BN (a BN after an Add: it stays)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y) + x))


def _prepared():
    torch.manual_seed(0)
    m = _StandaloneBn().eval()
    for bn in (m.bn1, m.bn2):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 4, 8, 8)
    program = torch.export.export(m, (x,))
    assert bn_after_conv(program.graph_module)  # before prepare: conv1 feeds bn1
    prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    prepared(x)
    return prepared, x


def test_a_bn_that_follows_no_conv_skips_the_fold_and_the_module_is_the_same():
    prepared, x = _prepared()
    # What the guard decides on: prepare folded bn1 into conv1; bn2 (after the Add) is left.
    assert any(_is_bn_node(n) for n in prepared.graph.nodes)
    assert not bn_after_conv(prepared)

    assert install_conv_bn_fold_guard()
    guarded = quantize_pt2e._fold_conv_bn_qat
    calls = []

    def counting(m):
        calls.append(1)
        return guarded.original(m)

    quantize_pt2e._fold_conv_bn_qat = counting
    try:
        with_fold = convert_pt2e(copy.deepcopy(prepared))
    finally:
        quantize_pt2e._fold_conv_bn_qat = guarded
    without_fold = convert_pt2e(copy.deepcopy(prepared))

    assert calls == [1]  # torchao's own pass ran for the reference conversion
    assert with_fold.code == without_fold.code
    assert torch.equal(with_fold(x), without_fold(x))


def _observer(samples):
    from torchao.quantization.pt2e.observer import HistogramObserver

    obs = HistogramObserver(dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine)
    for x in samples:
        obs(x)
    return obs


def _histograms():
    g = torch.Generator().manual_seed(0)
    shape = (1, 8, 32, 32)
    yield "normal", [torch.randn(shape, generator=g) for _ in range(3)]
    yield "relu with an outlier", [torch.relu(torch.randn(shape, generator=g)).index_put_((torch.tensor(0),) * 4,
                                                                                          torch.tensor(40.0))]
    yield "heavy tails", [torch.randn(shape, generator=g) / torch.rand(shape, generator=g).clamp_min(1e-3)]
    yield "growing range", [torch.randn(shape, generator=g) * (1 + 3 * i) for i in range(4)]
    yield "sigmoid", [torch.sigmoid(3 * torch.randn(shape, generator=g))]
    yield "few values", [torch.randint(0, 4, shape, generator=g).float()]
    yield "one value", [torch.full(shape, 0.5)]
    yield "tiny", [torch.randn(2, generator=g)]


@pytest.mark.parametrize("name", [n for n, _ in _histograms()])
def test_the_histogram_search_picks_torchao_s_min_and_max_bit_for_bit(name):
    from torchao.quantization.pt2e.observer import HistogramObserver

    from service.pipeline.quantize.toolchain_patches.pt2e import _non_linear_param_search, install_histogram_search

    obs = _observer(dict(_histograms())[name])
    assert install_histogram_search()
    original = _non_linear_param_search.original
    want = original(obs)
    got = HistogramObserver._non_linear_param_search(obs)
    assert HistogramObserver._non_linear_param_search is _non_linear_param_search
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_converted_model_is_the_same_with_the_fast_histogram_search():
    from torchao.quantization.pt2e.observer import HistogramObserver

    from service.pipeline.quantize.toolchain_patches.pt2e import _non_linear_param_search, install_histogram_search

    prepared, x = _prepared()
    for scale in (0.5, 3.0, 9.0):  # more calibration: the histograms widen and re-bin
        prepared(x * scale)
    assert install_histogram_search()
    HistogramObserver._non_linear_param_search = _non_linear_param_search.original
    try:
        reference = convert_pt2e(copy.deepcopy(prepared))
    finally:
        HistogramObserver._non_linear_param_search = _non_linear_param_search
    fast = convert_pt2e(copy.deepcopy(prepared))
    assert fast.code == reference.code
    consts = lambda m: {k: v for k, v in m.state_dict().items()}  # noqa: E731
    ref_c, fast_c = consts(reference), consts(fast)
    assert ref_c.keys() == fast_c.keys()
    assert all(torch.equal(ref_c[k], fast_c[k]) for k in ref_c)
    assert torch.equal(fast(x), reference(x))


def test_a_threshold_that_float32_rounds_onto_a_bin_walks_as_torchao_walks():
    """Bin 0 holds exactly float32(1e-5 x total) while 1e-5 x total is a little more: torch's float32
    comparison keeps the walk at bin 0 (min 0, max 0.9995), a float64 one would move it (0.9995, 1)."""
    from torchao.quantization.pt2e.observer import HistogramObserver

    from service.pipeline.quantize.toolchain_patches.pt2e import _non_linear_param_search, install_histogram_search

    obs = _observer([])
    total, first = 54687.5546875, 0.546875536441803  # float32 values; float32(1e-5 * total) == first
    hist = torch.zeros(obs.bins)
    hist[0], hist[-1] = first, total - first
    assert torch.sum(hist).item() == total and first < 1e-5 * total
    obs.histogram.copy_(hist)
    obs.min_val.copy_(torch.tensor(0.0))
    obs.max_val.copy_(torch.tensor(1.0))
    assert install_histogram_search()
    want = _non_linear_param_search.original(obs)
    got = HistogramObserver._non_linear_param_search(obs)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert float(want[1]) < 1.0  # the case where the comparison's precision decides


def test_torch_compares_a_float32_tensor_with_a_python_float_in_float32():
    """What the float walk relies on: the Python threshold is rounded to float32 before comparing."""
    one = torch.ones(1, dtype=torch.float32).cumsum(0)[0]
    assert not bool(one < 1.0 + 2**-30)  # in float64 it would be True
    assert not bool(one > 1.0 - 2**-30)


def _many_slices_model(pairs: int = 6, extra: int = 40):
    """``pairs`` halves of one tensor's last axis (SlicesSplit's pattern) among ``extra`` other nodes."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes, outs = [], []
    prev = "x"
    for k in range(extra):  # a chain of non-Slice nodes: every one of them is tried by the rule
        nodes.append(helper.make_node("Relu" if k % 2 else "Neg", [prev], [f"c{k}"]))
        prev = f"c{k}"
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), n)
             for n, v in (("zero", [0]), ("half", [4]), ("end", [8]), ("axis", [-1]))]
    for p in range(pairs):
        nodes.append(helper.make_node("Add", [prev, prev], [f"p{p}"]))
        nodes.append(helper.make_node("Slice", [f"p{p}", "zero", "half", "axis"], [f"lo{p}"]))
        nodes.append(helper.make_node("Slice", [f"p{p}", "half", "end", "axis"], [f"hi{p}"]))
        nodes.append(helper.make_node("Mul", [f"lo{p}", f"hi{p}"], [f"y{p}"]))
        outs.append(f"y{p}")
    graph = helper.make_graph(
        nodes, "slices", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 4]) for o in outs], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_the_multi_output_match_shortcut_optimizes_the_same_and_indexes_the_graph_only_for_slices():
    """onnxscript's optimizer writes the same model with the shortcut and without it, and the
    whole-graph index (SimplePatternMatcher's multi-output branch) is built only at Slices."""
    from onnxscript import ir, optimizer
    from onnxscript.rewriter._matcher import SimplePatternMatcher

    from service.pipeline.quantize.toolchain_patches.pt2e import match_unless_first_output_differs

    model = _many_slices_model()
    untouched = SimplePatternMatcher.match
    original = getattr(untouched, "original", untouched)
    indexed: list[str] = []

    def counting(self, model, graph, node, *args, **kwargs):
        if not self.pattern.has_single_output_node:
            indexed.append(node.op_type)
        return original(self, model, graph, node, *args, **kwargs)

    def optimized(match):
        SimplePatternMatcher.match = match
        try:
            m = ir.serde.deserialize_model(copy.deepcopy(model))
            optimizer.optimize_ir(m)  # what torch.onnx.export(optimize=True) runs
            return ir.serde.serialize_model(m).SerializeToString()
        finally:
            SimplePatternMatcher.match = untouched

    without = optimized(counting)
    every_node = list(indexed)
    indexed.clear()
    with_shortcut = optimized(match_unless_first_output_differs(counting))
    assert with_shortcut == without
    assert set(indexed) == {"Slice"}  # only a Slice can be SlicesSplit's first output
    assert len(every_node) > 4 * len(indexed)  # without it: every node, every pass


class _AddChain(torch.nn.Module):
    """x @ W, then 1200 Adds of a constant: each Add's input edge shares the spec of the Add before it."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n
        self.linear = torch.nn.Linear(8, 8)
        self.register_buffer("k", torch.full((1, 8), 1e-4))

    def forward(self, x):
        y = self.linear(x)
        for _ in range(self.n):
            y = y + self.k
        return y


def test_a_chain_of_1200_ops_sharing_a_spec_prepares_with_the_loop_and_recursed_past_the_limit_without():
    """3000 tiny Adds after a MatMul skipped the PT2E path with RecursionError (twentieth pass)."""
    from torchao.quantization.pt2e import prepare

    from service.pipeline.quantize.toolchain_patches.pt2e import find_root_edge_or_node, install_iterative_union_find

    assert install_iterative_union_find()
    program = torch.export.export(_AddChain(1200).eval(), (torch.randn(1, 8),))
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config())
    prepare._find_root_edge_or_node = prepare._find_root_edge_or_node.original
    try:
        with pytest.raises(RecursionError):
            prepare_pt2e(copy.deepcopy(program).module(), quantizer)
    finally:
        prepare._find_root_edge_or_node = find_root_edge_or_node
    prepared = prepare_pt2e(program.module(), quantizer)
    prepared(torch.randn(1, 8))


def test_the_loop_leaves_every_union_find_map_as_torchao_s_recursion_does():
    import random

    from torchao.quantization.pt2e import prepare

    from service.pipeline.quantize.toolchain_patches.pt2e import find_root_edge_or_node, install_iterative_union_find

    install_iterative_union_find()
    recursive = prepare._find_root_edge_or_node.original
    rng = random.Random(0)
    for _ in range(50):
        parent = {i: (rng.randrange(i) if i and rng.random() < 0.8 else i) for i in range(60)}
        ours, theirs = dict(parent), dict(parent)
        for q in rng.sample(range(60), 20):
            assert find_root_edge_or_node(q, ours) == recursive(q, theirs)
            assert ours == theirs
