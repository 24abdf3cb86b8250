"""The honest baseline: the course chapter's method, written plainly, in a fresh Python process.

    python bench/by_hand.py --example conv_relu --out DIR [--calibration-samples 16] [--eval-samples 8]
                            [--latency-runs 10] [--latency-warmup 2] [--json]

Same work as one quantcompare comparison with default options, in sequence, with the public APIs
only: torch.export -> PT2E (XNNPACKQuantizer, symmetric, per-channel) -> calibrate -> convert ->
torch.onnx.export(dynamo=True); the fp32 export; quant_pre_process + quantize_static in QDQ and in
QOperator format (MinMax, int8/int8, symmetric per-channel weights: the service's "matched" preset);
then each of the 4 files x 5 ORT levels: one session with optimized_model_filepath, the optimized
graph loaded and its ops counted, the eval samples run, SQNR vs fp32, latency (warmup + runs on one
sample, 1 intra-op thread) at the levels of --latency-levels. Samples are drawn as the service draws them (normal(0, 1), seeded,
calibration from seed, evaluation from seed+1), so the numbers can be compared too.

Only the model definition comes from quantcompare (``service.examples``): that is the user's model,
not the tool. With ``--json`` the last stdout line is a JSON object with per-step seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

T_START = time.perf_counter()

ARTIFACTS = ["fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator"]
LEVELS = {"disable_all": 0, "basic": 1, "extended": 2, "layout": 3, "all": 99}


def sqnr_db(ref, got):
    import numpy as np

    ref = ref.astype(np.float64).ravel()
    noise = ref - got.astype(np.float64).ravel()
    n = float(noise @ noise)
    return math.inf if n == 0 else 10 * math.log10(float(ref @ ref) / n)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--example", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--calibration-samples", type=int, default=16)
    p.add_argument("--eval-samples", type=int, default=8)
    p.add_argument("--latency-runs", type=int, default=10)
    p.add_argument("--latency-warmup", type=int, default=2)
    p.add_argument("--latency-levels", default=",".join(LEVELS),
                   help="comma-separated levels to time (default all five; 'all' makes the figures of a default job)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print per-step seconds as JSON on the last line")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    steps: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name):
        nonlocal t
        now = time.perf_counter()
        steps[name] = round(steps.get(name, 0.0) + now - t, 4)
        t = now

    import warnings

    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger().setLevel(logging.ERROR)
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from torch.export import Dim
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    from service.examples import get_example  # the user's model definition, nothing else

    lap("import")

    # The model and its samples ------------------------------------------------------------------
    example = get_example(args.example)
    model = example.factory()
    inp = example.inputs[0]
    shape = [1 if isinstance(d, str) else d for d in inp.shape]
    rng = np.random.default_rng(args.seed)
    calib = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.calibration_samples)]
    rng = np.random.default_rng(args.seed + 1)
    evals = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.eval_samples)]
    export_shape = [2] + shape[1:]  # torch.export specializes a batch of 1: export with 2
    dyn = ({0: Dim("batch")},)
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(export_shape),), dynamic_shapes=dyn)
    lap("torch.export")

    # fp32 ONNX ---------------------------------------------------------------------------------
    paths = {a: os.path.join(args.out, f"{a}.onnx") for a in ARTIFACTS}
    with torch.no_grad():
        torch.onnx.export(ep, dynamo=True, verbose=False).save(paths["fp32"])
    lap("fp32 export")

    # PT2E --------------------------------------------------------------------------------------
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(ep.module(), quantizer)
    lap("pt2e prepare")
    with torch.no_grad():
        for x in calib:
            prepared(torch.from_numpy(x))
    lap("pt2e calibrate")
    converted = convert_pt2e(prepared)
    lap("pt2e convert")
    with torch.no_grad():
        torch.onnx.export(converted, (torch.randn(export_shape),), dynamo=True, verbose=False,
                          dynamic_shapes=dyn).save(paths["pt2e_qdq"])
    lap("pt2e export")

    # ORT quantize_static -----------------------------------------------------------------------
    pre = os.path.join(args.out, "fp32.pre.onnx")
    try:
        quant_pre_process(paths["fp32"], pre)
    except Exception as e:  # noqa: BLE001 - what a notebook would do: carry on with the fp32 file
        print(f"quant_pre_process failed: {e!r}", file=sys.stderr)
        pre = paths["fp32"]
    lap("ort pre_process")
    input_name = onnx.load(paths["fp32"], load_external_data=False).graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {input_name: x}

    for name, fmt in (("ort_qdq", QuantFormat.QDQ), ("ort_qoperator", QuantFormat.QOperator)):
        quantize_static(pre, paths[name], Reader(), quant_format=fmt, per_channel=True, reduce_range=False,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
        lap(f"{name} quantize")

    # 4 files x 5 levels ------------------------------------------------------------------------
    rows = {}
    reference = None
    for name in ARTIFACTS:
        rows[name] = {}
        for level, value in LEVELS.items():
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel(value)
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            opt_path = os.path.join(args.out, f"{name}.{level}.onnx")
            so.optimized_model_filepath = opt_path
            sess = ort.InferenceSession(paths[name], so, providers=["CPUExecutionProvider"])
            ops = {}
            for node in onnx.load(opt_path, load_external_data=False).graph.node:
                key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
                ops[key] = ops.get(key, 0) + 1
            lap("sessions + graphs")
            feed_name = sess.get_inputs()[0].name
            out = np.concatenate([sess.run(None, {feed_name: x})[0] for x in evals])
            if reference is None:
                reference = out
            lap("numerics")
            if level not in args.latency_levels.split(","):
                rows[name][level] = (sqnr_db(reference, out), math.nan, sum(ops.values()))
                continue
            for _ in range(args.latency_warmup):
                sess.run(None, {feed_name: evals[0]})
            times = []
            for _ in range(args.latency_runs):
                t0 = time.perf_counter()
                sess.run(None, {feed_name: evals[0]})
                times.append((time.perf_counter() - t0) * 1000)
            lap("latency")
            rows[name][level] = (sqnr_db(reference, out), float(np.median(times)), sum(ops.values()))

    print(f"{'by hand: ' + args.example:<22}" + "".join(f"{lv:>22}" for lv in LEVELS))
    for name, per in rows.items():
        cells = "".join(f"{s:>8.1f} dB {ms:6.2f} ms {n:3d}n" if math.isfinite(s) else f"{'exact':>11} {ms:6.2f} ms {n:3d}n"
                        for s, ms, n in per.values())
        print(f"{name:<22}{cells}")
    steps["in-process total"] = round(time.perf_counter() - T_START, 4)
    if args.json:
        print(json.dumps({"example": args.example, "steps": steps,
                          "sqnr_all": {a: rows[a]["all"][0] if math.isfinite(rows[a]["all"][0]) else None
                                       for a in ARTIFACTS}}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
