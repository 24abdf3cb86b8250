"""PT2E calibration shortcuts must not change what the observers compute."""

from __future__ import annotations

import torch

from service.examples import EXAMPLES
from service.pipeline.quantize.pt2e import _observe_weights_once


def _prepared():
    from torch.export import export
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    model = EXAMPLES["tiny_conv_net"].factory()
    program = export(model, (torch.randn(2, 3, 16, 16),))
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    return prepare_pt2e(program.module(), quantizer)


def _observer_state(prepared):
    return {name: (m.min_val.clone(), m.max_val.clone())
            for name, m in prepared.named_modules() if hasattr(m, "min_val") and hasattr(m, "max_val")}


def test_weights_observed_once_give_the_same_ranges_as_every_pass():
    torch.manual_seed(0)
    batches = [torch.randn(2, 3, 16, 16) for _ in range(4)]
    full, once = _prepared(), _prepared()
    with torch.no_grad():
        for b in batches:
            full(b)
        for i, b in enumerate(batches):
            once(b)
            if i == 0:
                frozen = _observe_weights_once(once)
    assert frozen == 3  # the three weights (two convs, one linear); activations keep observing
    a, b = _observer_state(full), _observer_state(once)
    assert a.keys() == b.keys() and a
    for name in a:
        assert torch.equal(a[name][0], b[name][0]) and torch.equal(a[name][1], b[name][1]), name
