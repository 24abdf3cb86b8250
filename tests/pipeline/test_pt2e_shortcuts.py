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

from service.pipeline.quantize.pt2e_shortcuts import bn_after_conv, install_conv_bn_fold_guard  # noqa: E402


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
