"""PT2E calibration cost vs plain fp32 forward passes over the same samples, and what batching changes.

    python bench/calibration.py [--models conv_relu,op_zoo_net,resnet18,tiny_transformer] [--samples N] [--json]

Per model, in one warm process, with the XNNPACK symmetric per-channel config the service uses
(HistogramObserver on activations, PerChannelMinMaxObserver on weights):

- ``fp32 fwd``: the exported program's module, one forward per calibration sample (batch 1);
- ``calibrate``: the prepared (observed) module over the same samples, as the service does it;
  split into time inside activation observers, weight observers, and the rest (the model);
- ``batched``: the same samples as one batch of N (the program has a dynamic batch dim);
- ``convert``: convert_pt2e (HistogramObserver's qparam search runs here);
- whether the batched run gives the same qparams: max relative scale difference and zero-point
  changes over every observer. MinMax observers see the same min/max either way; HistogramObserver
  bins differently (one histogram over all values vs. per-sample histograms re-binned as the range
  grows), so its scales may move: the table says by how much.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_SAMPLES = {"resnet18": 32}


def _observers(module):
    from torchao.quantization.pt2e.observer import ObserverBase

    return {name: m for name, m in module.named_modules() if isinstance(m, ObserverBase)}


def _timed_observers(module, totals):
    """Wrap every observer's forward to add its wall time to totals[kind]."""
    from torchao.quantization.pt2e.observer import HistogramObserver

    for _name, obs in _observers(module).items():
        kind = "activation observers" if isinstance(obs, HistogramObserver) else "weight observers"
        orig = obs.forward

        def fwd(x, _orig=orig, _kind=kind):
            t = time.perf_counter()
            try:
                return _orig(x)
            finally:
                totals[_kind] += time.perf_counter() - t

        obs.forward = fwd


def _qparams(module):
    out = {}
    for name, obs in _observers(module).items():
        scale, zp = obs.calculate_qparams()
        out[name] = (scale.detach().double().flatten(), zp.detach().flatten())
    return out


def measure(model_name: str, samples: int, seed: int = 0) -> dict:
    import numpy as np
    import torch
    from torch.export import Dim
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    from service.examples import get_example

    ex = get_example(model_name)
    shape = [1 if isinstance(d, str) else d for d in ex.inputs[0].shape]
    rng = np.random.default_rng(seed)
    feeds = [torch.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(samples)]
    with torch.no_grad():
        ep = torch.export.export(ex.factory(), (torch.randn([2] + shape[1:]),), dynamic_shapes=({0: Dim("batch")},))
    config = get_symmetric_quantization_config(is_per_channel=True)
    r: dict = {"model": model_name, "samples": samples}

    with torch.no_grad():
        fp32 = ep.module()
        fp32(feeds[0])  # one warm-up call, as the observed module gets none either
        t = time.perf_counter()
        for x in feeds:
            fp32(x)
        r["fp32 fwd"] = time.perf_counter() - t

        t = time.perf_counter()
        prepared = prepare_pt2e(ep.module(), XNNPACKQuantizer().set_global(config))
        r["prepare"] = time.perf_counter() - t
        totals = defaultdict(float)
        _timed_observers(prepared, totals)
        t = time.perf_counter()
        for x in feeds:
            prepared(x)
        r["calibrate"] = time.perf_counter() - t
        r["in activation observers"] = totals["activation observers"]
        r["in weight observers"] = totals["weight observers"]
        per_sample = _qparams(prepared)
        t = time.perf_counter()
        convert_pt2e(prepared)
        r["convert"] = time.perf_counter() - t

        batched = prepare_pt2e(ep.module(), XNNPACKQuantizer().set_global(config))
        big = torch.cat(feeds)
        t = time.perf_counter()
        batched(big)
        r["batched calibrate"] = time.perf_counter() - t
        one_batch = _qparams(batched)

    worst, zp_changed, n = 0.0, 0, 0
    for name, (s1, z1) in per_sample.items():
        s2, z2 = one_batch[name]
        rel = ((s1 - s2).abs() / s1.clamp_min(1e-12)).max().item()
        worst = max(worst, rel)
        zp_changed += int((z1 != z2).sum().item())
        n += z1.numel()
    r["batched max rel scale diff"] = worst
    r["batched zero points changed"] = f"{zp_changed}/{n}"
    r["calibrate / fp32 fwd"] = r["calibrate"] / r["fp32 fwd"] if r["fp32 fwd"] else None
    r["batched / calibrate"] = r["batched calibrate"] / r["calibrate"] if r["calibrate"] else None
    return r


COLUMNS = ["fp32 fwd", "calibrate", "in activation observers", "in weight observers", "convert",
           "batched calibrate", "calibrate / fp32 fwd", "batched / calibrate", "batched max rel scale diff",
           "batched zero points changed"]


def print_table(rows: list[dict]) -> None:
    print("PT2E calibration (XNNPACK symmetric per-channel: HistogramObserver activations, "
          "PerChannelMinMaxObserver weights); seconds unless a ratio")
    head = f"{'model':<18}{'N':>4}" + "".join(f"{c:>14}" for c in ("fp32 fwd", "calibrate", "act obs", "wt obs",
                                                                  "convert", "batched", "cal/fp32", "batch/cal",
                                                                  "Δscale max", "Δzp"))
    print(head)
    for r in rows:
        cells = []
        for c in COLUMNS:
            v = r[c]
            if isinstance(v, str):
                cells.append(f"{v:>14}")
            elif c.endswith("diff"):
                cells.append(f"{v:>13.2%} ")
            elif "/" in c:
                cells.append(f"{v:>13.1f}x")
            else:
                cells.append(f"{v:>14.3f}")
        print(f"{r['model']:<18}{r['samples']:>4}" + "".join(cells))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="conv_relu,op_zoo_net,resnet18,tiny_transformer")
    p.add_argument("--samples", type=int, default=None, help="calibration samples (default: 16; 32 for resnet18)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    rows = [measure(m, args.samples or DEFAULT_SAMPLES.get(m, 16)) for m in args.models.split(",")]
    print_table(rows)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
