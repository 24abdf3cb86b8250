"""torchao work done faster or skipped where that cannot change the result.

1. The QAT conv-bn fold, skipped when no BN follows a conv.

``convert_pt2e`` always calls ``_fold_conv_bn_qat`` when the graph holds any batch norm. That
pass builds its match and replacement patterns by ``torch.export``-ing 96 small pattern graphs
(4 conv kinds x 12 variants x match and replacement), 28 s of a 46 s convert on PP-OCRv4's
detector here, and then only rewrites a BN whose input is a conv. After ``prepare_pt2e`` has
folded every conv -> BN it could (``_fuse_conv_bn_``), the BNs left in a post-training graph are standalone
ones (after an Add, a Concat, on an input: PaddlePaddle and Keras exports have them), so the
patterns find nothing and the pass only costs time.

The guard calls torchao's pass unchanged whenever some BN takes a conv's output; otherwise it
returns the graph as is. A test pins that the converted module is the same code either way
(``tests/pipeline/quantize/test_pt2e_toolchain_patches.py``). torchao is pinned; if the names move, the
guard is not installed and convert takes the usual path.

2. ``HistogramObserver._non_linear_param_search`` (the XNNPACK config's activation observer picks
its min/max there, in ``convert_pt2e``) walks the cumulative histogram with one 0-d tensor
comparison per step, ``cSum[l] < next_alpha * total``, some thousands of steps per observer:
13 of 16 s of PP-OCRv4's detector at 320x320 (py-spy). The same walk over the same float32
values as Python floats, each threshold rounded to float32 as torch rounds a Python scalar
compared with a float32 tensor, takes the same steps to the same bins; the quantization error
and the returned min/max are still computed by torchao's own code. A test holds the result
equal, bit for bit, to torchao's on many histograms and a whole converted model.

3. onnxscript's rewriter (``torch.onnx.export(optimize=True)``) tries each rule at every node. For
a rule whose pattern has several output nodes (``SlicesSplit``: two Slices of one tensor) its
``SimplePatternMatcher.match`` first indexes the whole graph by op, and only then finds that the
node it was given is not a Slice: graph size x graph size per pass. On an unrolled LSTM's 2762
nodes that was half of a 146 s PT2E path (openWakeWord's ``hey_mycroft``, py-spy). The first
output node of every combination it tries is that node, matched by ``NodePattern.matches``, which
fails on the op type or the domain before anything else; the shortcut applies those same two
checks first and returns the matcher's failure without the index. Same rewrites, same file (a
test compares the optimized models byte for byte with the shortcut on and off).

4. ``prepare_pt2e``'s union-find over edges that share a quantization spec
(``prepare._find_root_edge_or_node``) recurses once per link: a graph whose ops share their input's
spec in a chain of ~1000 (3000 tiny Adds after a MatMul, docs/history/notes.md twentieth pass) raised
RecursionError, and the PT2E path was skipped with Python's words. The loop walks to the same root
and compresses the same path, so every map ends as torchao's recursion leaves it (a test compares).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from service.pipeline.quantize.toolchain_patches import replace_once


def bn_after_conv(m) -> bool:
    """Some batch norm of ``m`` takes a conv's (or conv transpose's) output: torchao's QAT
    patterns can match only there."""
    from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node

    return any(_is_bn_node(n) and n.args and _is_conv_or_conv_transpose_node(n.args[0]) for n in m.graph.nodes)


def install_conv_bn_fold_guard() -> bool:
    """Wrap ``quantize_pt2e._fold_conv_bn_qat`` once per process. True when the guard is on."""

    def locate():
        from torchao.quantization.pt2e import quantize_pt2e
        from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node  # noqa: F401

        return quantize_pt2e, "_fold_conv_bn_qat"

    def guard(original):
        def fold_conv_bn_qat_when_a_conv_feeds_a_bn(m):
            return original(m) if bn_after_conv(m) else m

        return fold_conv_bn_qat_when_a_conv_feeds_a_bn

    return replace_once("conv-bn fold guard", locate, guard)


def _non_linear_param_search(self):
    """torchao's ``HistogramObserver._non_linear_param_search`` (torchao 0.18), its bin walk in floats.

    ``cSum[l] < x`` with a float32 0-d tensor and a Python float compares in float32 (the scalar
    is cast to the tensor's dtype), so each threshold is rounded to float32 once and compared
    with the exact float32 values of ``cSum``: every comparison gives what torch's gives.
    """
    import torch

    assert self.histogram.size()[0] == self.bins, "bins mismatch"
    bin_width = (self.max_val - self.min_val) / self.bins
    total = torch.sum(self.histogram).item()
    c_sum = torch.cumsum(self.histogram, dim=0).tolist()  # float32 values, exact as Python floats
    f32 = np.float32

    stepsize = 1e-5
    alpha, beta = 0.0, 1.0
    start_bin, end_bin = 0, self.bins - 1
    norm_min = float("inf")
    while alpha < beta:
        next_alpha = alpha + stepsize
        next_beta = beta - stepsize
        l, r = start_bin, end_bin
        if l < end_bin:  # (a collapsed range never compares: no threshold to round)
            low = float(f32(next_alpha * total))
            while l < end_bin and c_sum[l] < low:
                l += 1
        if r > start_bin:
            high = float(f32(next_beta * total))
            while r > start_bin and c_sum[r] > high:
                r -= 1
        next_start_bin, next_end_bin = start_bin, end_bin
        if (l - start_bin) > (end_bin - r):
            next_start_bin = l
            alpha = next_alpha
        else:
            next_end_bin = r
            beta = next_beta
        if next_start_bin == start_bin and next_end_bin == end_bin:
            continue
        norm = self._compute_quantization_error(next_start_bin, next_end_bin)
        if norm > norm_min:
            break
        norm_min = norm
        start_bin, end_bin = next_start_bin, next_end_bin

    new_min = self.min_val + bin_width * start_bin
    new_max = self.min_val + bin_width * (end_bin + 1)
    return new_min, new_max


def install_histogram_search() -> bool:
    """Put the float walk in place of torchao's, once per process. True when installed."""

    def locate():
        from torchao.quantization.pt2e.observer import HistogramObserver

        return HistogramObserver, "_non_linear_param_search"

    return replace_once("histogram search", locate, lambda original: _non_linear_param_search)


def find_root_edge_or_node(edge_or_node, shared_with_map: dict):
    """torchao's ``_find_root_edge_or_node`` as a loop: the root, every entry on the way pointed at it."""
    path = []
    node = edge_or_node
    while (parent := shared_with_map[node]) != node:  # torchao compares with ==, as here
        path.append(node)
        node = parent
    for on_the_way in path:
        shared_with_map[on_the_way] = node
    return node


def install_iterative_union_find() -> bool:
    """Put the loop in place of torchao's recursion (its own recursive call reads the module's name too)."""

    def locate():
        from torchao.quantization.pt2e import prepare

        return prepare, "_find_root_edge_or_node"

    return replace_once("iterative union-find", locate, lambda original: find_root_edge_or_node)


def match_unless_first_output_differs(original: Callable) -> Callable:
    """``SimplePatternMatcher.match`` that fails at once where the node cannot be the first output."""

    def match(self, model, graph_or_function, node, *args, **kwargs):
        pattern = self.pattern
        if not pattern.has_single_output_node:
            first = pattern.output_nodes[0]
            # NodePattern.matches' first two checks: the op type, then the domain.
            if not (first.op.matches(node.op_type) and first.domain.matches(node.domain)):
                from onnxscript.rewriter import _basics

                return _basics.MatchResult().fail("No match found.")
        return original(self, model, graph_or_function, node, *args, **kwargs)

    return match


def install_multi_output_match_shortcut() -> bool:
    """Skip onnxscript's whole-graph index where the node cannot be the pattern's first output."""

    def locate():
        from onnxscript.rewriter._matcher import SimplePatternMatcher

        return SimplePatternMatcher, "match"

    return replace_once("multi-output match shortcut", locate, match_unless_first_output_differs)
