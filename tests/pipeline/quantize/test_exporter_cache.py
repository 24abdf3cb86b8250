"""The memoized torch.onnx function registry must not change a single exported byte.

Runs in a fresh interpreter: the bug this guards against (a registry built before torchao
registered its quantized_decomposed ops, reused for the PT2E export) only shows when torchao has
not been imported yet, which the rest of the suite would hide.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import warnings; warnings.filterwarnings("ignore")
    import torch
    from service.examples import EXAMPLES
    from service.pipeline.quantize.exporter_cache import install_exporter_registry_cache, uninstall_exporter_registry_cache

    def fp32_bytes(name):
        with torch.no_grad():
            p = torch.onnx.export(EXAMPLES[name].factory(), (torch.randn(2, 3, 16, 16),), dynamo=True, verbose=False)
        return p.model_proto.SerializeToString()

    def pt2e_bytes():
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
        x = torch.randn(2, 3, 16, 16)
        prepared = prepare_pt2e(torch.export.export(EXAMPLES["conv_relu"].factory(), (x,)).module(),
                                XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
        prepared(x)
        with torch.no_grad():
            p = torch.onnx.export(convert_pt2e(prepared), (x,), dynamo=True, verbose=False)
        return p.model_proto.SerializeToString()

    assert install_exporter_registry_cache()
    cached = [fp32_bytes("conv_relu"), pt2e_bytes(), fp32_bytes("tiny_conv_net")]  # torchao loads mid-way
    uninstall_exporter_registry_cache()
    plain = [fp32_bytes("conv_relu"), pt2e_bytes(), fp32_bytes("tiny_conv_net")]
    assert cached == plain, [a == b for a, b in zip(cached, plain)]
    print("identical")
''')


def test_exports_are_identical_with_the_registry_cache_even_when_torchao_loads_later():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "identical" in proc.stdout, proc.stderr[-3000:]
