"""Evidence for one speed-up: the PT2E path does not need the fp32 ONNX; can it overlap the rest?

    python bench/parallel_paths.py [--models conv_relu,op_zoo_net,tiny_transformer] [--reps 3]

In one warm process, from the same ExportedProgram and samples, times
  A = fp32 torch.onnx.export + quant_pre_process + quantize_static QDQ + QOperator  (the ORT side)
  B = prepare_pt2e + calibrate + convert_pt2e + torch.onnx.export                 (the PT2E side)
run one after the other (as run_comparison does now) and in two threads at once. Threads share
the GIL: the gain is bounded by how much of A and B runs in native code. ``max(A, B)`` is what two
processes would get on two idle cores (the lower bound for a job).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="conv_relu,op_zoo_net,tiny_transformer")
    p.add_argument("--reps", type=int, default=3)
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
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    from service.examples import get_example

    print(f"{'model':<18}{'A ort side':>12}{'B pt2e side':>12}{'A+B seq':>10}{'2 threads':>11}{'max(A,B)':>10}")
    for name in args.models.split(","):
        ex = get_example(name)
        shape = [1 if isinstance(d, str) else d for d in ex.inputs[0].shape]
        rng = np.random.default_rng(0)
        calib = [rng.standard_normal(shape).astype(np.float32) for _ in range(16)]
        xs = (torch.randn([2] + shape[1:]),)
        dyn = ({0: Dim("batch")},)
        with torch.no_grad():
            ep = torch.export.export(ex.factory(), xs, dynamic_shapes=dyn)
        tmp = Path(tempfile.mkdtemp(prefix="qc-par-"))

        def side_a(tag):
            with torch.no_grad():
                fp = tmp / f"{tag}.fp32.onnx"
                torch.onnx.export(ep, dynamo=True, verbose=False).save(str(fp))
            pre = tmp / f"{tag}.pre.onnx"
            quant_pre_process(str(fp), str(pre))
            for fmt in (QuantFormat.QDQ, QuantFormat.QOperator):
                it = iter(calib)
                reader = type("R", (CalibrationDataReader,), {
                    "get_next": lambda self: (lambda x: None if x is None else {"x": x})(next(it, None))})()
                quantize_static(str(pre), str(tmp / f"{tag}.{fmt}.onnx"), reader, quant_format=fmt, per_channel=True,
                                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                                extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})

        def side_b(tag):
            with torch.no_grad():
                q = prepare_pt2e(ep.module(), XNNPACKQuantizer().set_global(
                    get_symmetric_quantization_config(is_per_channel=True)))
                for x in calib:
                    q(torch.from_numpy(x))
                c = convert_pt2e(q)
                torch.onnx.export(c, xs, dynamo=True, verbose=False, dynamic_shapes=dyn).save(str(tmp / f"{tag}.pt2e.onnx"))

        def timed(fn, tag):
            t = time.perf_counter()
            fn(tag)
            return time.perf_counter() - t

        side_a("warm"), side_b("warm")
        a_s, b_s, seq, par = [], [], [], []
        for i in range(args.reps):
            a, b = timed(side_a, f"a{i}"), timed(side_b, f"b{i}")
            a_s.append(a), b_s.append(b), seq.append(a + b)
            ths = [threading.Thread(target=side_a, args=(f"pa{i}",)), threading.Thread(target=side_b, args=(f"pb{i}",))]
            t = time.perf_counter()
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            par.append(time.perf_counter() - t)
        m = statistics.median
        print(f"{name:<18}{m(a_s):>12.2f}{m(b_s):>12.2f}{m(seq):>10.2f}{m(par):>11.2f}{max(m(a_s), m(b_s)):>10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
