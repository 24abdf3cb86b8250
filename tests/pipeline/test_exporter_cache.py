"""The memoized torch.onnx function registry must not change a single exported byte."""

from __future__ import annotations

import torch

from service.examples import EXAMPLES
from service.pipeline.exporter_cache import install_exporter_registry_cache, uninstall_exporter_registry_cache


def _export_bytes(name: str) -> bytes:
    model = EXAMPLES[name].factory()
    with torch.no_grad():
        program = torch.onnx.export(model, (torch.randn(2, 3, 16, 16),), dynamo=True, verbose=False)
    return program.model_proto.SerializeToString()


def test_exports_are_identical_with_the_registry_cache():
    uninstall_exporter_registry_cache()
    plain = [_export_bytes("conv_relu"), _export_bytes("tiny_conv_net")]
    try:
        assert install_exporter_registry_cache()
        cached = [_export_bytes("conv_relu"), _export_bytes("tiny_conv_net"), _export_bytes("conv_relu")]
    finally:
        uninstall_exporter_registry_cache()
    assert cached[0] == plain[0] and cached[1] == plain[1] and cached[2] == plain[0]
