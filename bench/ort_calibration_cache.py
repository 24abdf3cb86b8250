"""Evidence for one speed-up: ORT's QDQ and QOperator calls calibrate the same model on the same samples.

    python bench/ort_calibration_cache.py [--models op_zoo_net,resnet18] [--samples 16|32]

``quantize_static`` (onnxruntime >= 1.2x) takes ``calibration_cache_path``: the first call writes
the tensor ranges, the second loads them instead of running the augmented model over every
calibration sample again. Both formats use the same preprocessed model, calibration method and
op types, so the ranges are the same by construction; this checks the output files are
byte-identical and measures the time saved.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="op_zoo_net,resnet18")
    args = p.parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    import numpy as np
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from torch.export import Dim

    from service.examples import get_example

    print(f"{'model':<18}{'N':>4}{'QDQ+QOp now':>13}{'with cache':>12}{'saved':>8}{'identical files':>17}")
    for name in args.models.split(","):
        n = 32 if name == "resnet18" else 16
        ex = get_example(name)
        shape = [1 if isinstance(d, str) else d for d in ex.inputs[0].shape]
        rng = np.random.default_rng(0)
        calib = [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]
        tmp = Path(tempfile.mkdtemp(prefix="qc-ortcache-"))
        with torch.no_grad():
            ep = torch.export.export(ex.factory(), (torch.randn([2] + shape[1:]),), dynamic_shapes=({0: Dim("batch")},))
            torch.onnx.export(ep, dynamo=True, verbose=False).save(str(tmp / "fp32.onnx"))
        quant_pre_process(str(tmp / "fp32.onnx"), str(tmp / "pre.onnx"))

        def reader():
            it = iter(calib)
            return type("R", (CalibrationDataReader,), {
                "get_next": lambda self: (lambda x: None if x is None else {"x": x})(next(it, None))})()

        def both(tag, cache):
            t = time.perf_counter()
            for fmt in (QuantFormat.QDQ, QuantFormat.QOperator):
                quantize_static(str(tmp / "pre.onnx"), str(tmp / f"{tag}.{fmt.name}.onnx"), reader(), quant_format=fmt,
                                per_channel=True, reduce_range=False, activation_type=QuantType.QInt8,
                                weight_type=QuantType.QInt8,
                                extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
                                **({"calibration_cache_path": str(cache)} if cache else {}))
            return time.perf_counter() - t

        plain = both("plain", None)
        cached = both("cached", tmp / "ranges.json")
        same = all((tmp / f"plain.{f}.onnx").read_bytes() == (tmp / f"cached.{f}.onnx").read_bytes()
                   for f in ("QDQ", "QOperator"))
        print(f"{name:<18}{n:>4}{plain:>13.2f}{cached:>12.2f}{plain - cached:>8.2f}{str(same):>17}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
