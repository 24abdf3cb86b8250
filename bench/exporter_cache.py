"""Evidence for one speed-up: torch.onnx.export rebuilds its ONNX function registry on every call.

    python bench/exporter_cache.py [--models conv_relu,op_zoo_net,tiny_transformer] [--reps 3]

``torch.onnx.export(dynamo=True)`` calls ``ONNXRegistry.from_torchlib()`` each time (it walks
every torchlib function and builds its signature): a fixed cost per export, paid twice per job
(fp32 and pt2e_qdq) even in a warm worker. This measures, in one warm process, the fp32 and the
PT2E export of each model with the registry built per call (torch's own behaviour) and with a memoized registry
(``service.pipeline.quantize.exporter_cache``, which the workers and the CLI install), alternating, and checks that the ONNX bytes are identical.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.pipeline.quantize.exporter_cache import (  # noqa: E402 - after the path insert
    install_exporter_registry_cache,
    uninstall_exporter_registry_cache,
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="conv_relu,op_zoo_net,tiny_transformer")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    import torch
    from torch.export import Dim
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    from service.examples import get_example

    print(f"{'model':<18}{'export':<8}{'per call (s)':>14}{'memoized (s)':>14}{'saved':>8}{'same bytes':>12}")
    for name in args.models.split(","):
        ex = get_example(name)
        shape = [1 if isinstance(d, str) else d for d in ex.inputs[0].shape]
        xs = (torch.randn([2] + shape[1:]),)
        dyn = ({0: Dim("batch")},)
        with torch.no_grad():
            ep = torch.export.export(ex.factory(), xs, dynamic_shapes=dyn)
            prepared = prepare_pt2e(ep.module(),
                                    XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)))
            for _ in range(4):
                prepared(torch.randn(shape))
            converted = convert_pt2e(prepared)
        jobs = {
            "fp32": lambda: torch.onnx.export(ep, dynamo=True, verbose=False),
            "pt2e": lambda: torch.onnx.export(converted, xs, dynamo=True, verbose=False, dynamic_shapes=dyn),
        }
        for label, fn in jobs.items():
            with torch.no_grad():
                fn()  # warm
                plain, cached, same = [], [], True
                for _ in range(args.reps):
                    t = time.perf_counter()
                    a = fn().model_proto.SerializeToString()
                    plain.append(time.perf_counter() - t)
                    install_exporter_registry_cache()
                    try:
                        fn()  # first call fills the cache; measure the next
                        t = time.perf_counter()
                        b = fn().model_proto.SerializeToString()
                        cached.append(time.perf_counter() - t)
                    finally:
                        uninstall_exporter_registry_cache()
                    same = same and a == b
            mp, mc = statistics.median(plain), statistics.median(cached)
            print(f"{name:<18}{label:<8}{mp:>14.3f}{mc:>14.3f}{mp - mc:>8.2f}{str(same):>12}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
