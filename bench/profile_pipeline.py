"""Where the time of one comparison goes: ``run_comparison`` in-process under cProfile.

    python bench/profile_pipeline.py [--models conv_relu,op_zoo_net] [--repeat 2] [--top 25] [--dump DIR]

Runs each example ``--repeat`` times in one process (the first run is "cold": it pays imports
and exporter warm-up, like the CLI; later runs are "warm", like a service worker) and prints, per
run, the stage timings and the cumulative seconds of the toolchain calls that matter, then the top
functions by cumulative time. ``--dump DIR`` writes each report (.report.json) and .prof files for snakeviz / pstats.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# (label, file suffix, function name) as pstats names them.
KEY_CALLS = [
    ("torch.export.export", "torch/export/__init__.py", "export"),
    ("torch.onnx.export", "torch/onnx/__init__.py", "export"),
    ("prepare_pt2e", "quantize_pt2e.py", "prepare_pt2e"),
    ("convert_pt2e", "quantize_pt2e.py", "convert_pt2e"),
    ("HistogramObserver.forward", "observer.py", "forward"),
    ("quant_pre_process", "shape_inference.py", "quant_pre_process"),
    ("quantize_static", "quantize.py", "quantize_static"),
    ("InferenceSession()", "onnxruntime_inference_collection.py", "__init__"),
    ("session.run", "onnxruntime_inference_collection.py", "run"),
    ("onnx.load", "onnx/__init__.py", "load_model"),
    ("onnx.save", "onnx/__init__.py", "save_model"),
    ("graph_from_path", "vocabulary.py", "graph_from_path"),
    ("diff_graphs", "graph_diff.py", "diff_graphs"),
    ("latency_alone", "latency.py", "latency_alone"),
    ("environment()", "environment.py", "environment"),
    ("analyze_levels", "levels.py", "analyze_levels"),
]


def key_seconds(stats: pstats.Stats) -> dict[str, float]:
    out = {}
    for label, suffix, func in KEY_CALLS:
        total = 0.0
        for (filename, _line, fname), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
            if fname == func and filename.replace(os.sep, "/").endswith(suffix):
                total = max(total, ct)  # recursion-safe: the outermost entry holds the total
        out[label] = total
    return out


def fp32_inference_seconds(fp32_path: Path, report) -> float:
    """The unit of job time: one fp32 inference of the resolved input shapes, 1 intra-op thread."""
    import numpy as np

    from service.pipeline.ort.sessions import session_for

    s = session_for(fp32_path, "all", intra_op_threads=1)
    feed = {}
    for spec in report.model.inputs:
        shape = report.model.resolved_input_shapes.get(spec.name)
        dtype = np.dtype(spec.dtype) if spec.dtype else np.float32
        feed[spec.name] = (np.random.default_rng(0).random(shape).astype(dtype) if dtype.kind == "f"
                           else np.zeros(shape, dtype))
    for _ in range(2):
        s.run(None, feed)
    times = []
    for _ in range(7):
        t = time.perf_counter()
        s.run(None, feed)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="conv_relu,op_zoo_net")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--calibration-samples", type=int, default=None)
    p.add_argument("--dump", default=None)
    p.add_argument("--model-file", default=None, help="an .onnx to profile instead of --models (e.g. a corpus model)")
    p.add_argument("--options", default="{}", help="ComparisonOptions as JSON, e.g. '{\"input_shapes\": {...}}'")
    p.add_argument("--no-profile", action="store_true", help="wall times only (cProfile slows ORT-heavy runs)")
    args = p.parse_args(argv)

    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    t0 = time.perf_counter()
    import torch  # noqa: F401
    t_torch = time.perf_counter() - t0
    import onnxruntime  # noqa: F401
    import torchao  # noqa: F401

    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    t_imports = time.perf_counter() - t0
    print(f"imports: torch {t_torch:.2f}s, torch+torchao+onnxruntime+pipeline {t_imports:.2f}s")

    import json

    models = [args.model_file] if args.model_file else args.models.split(",")
    for model in models:
        opts = json.loads(args.options)
        if args.calibration_samples or model == "resnet18":
            opts["calibration_samples"] = args.calibration_samples or 32
        options = ComparisonOptions(**opts)
        for i in range(args.repeat):
            prof = cProfile.Profile()
            with tempfile.TemporaryDirectory(prefix="qc-prof-") as d:
                request = (ComparisonRequest(options=options, model_path=Path(model), model_name=Path(model).stem)
                           if args.model_file else ComparisonRequest(options=options, example=model))
                t = time.perf_counter()
                if not args.no_profile:
                    prof.enable()
                report = run_comparison(request, Path(d))
                prof.disable()
                wall = time.perf_counter() - t
                fp32_s = fp32_inference_seconds(Path(d) / "artifacts" / "fp32.onnx", report)
            stats = pstats.Stats(prof) if not args.no_profile else None
            label = "cold" if i == 0 else "warm"
            print(f"\n=== {Path(model).name} run {i + 1} ({label}): {wall:.2f}s wall"
                  f"{'' if args.no_profile else ' (under cProfile)'}; one fp32 inference {fp32_s * 1000:.1f} ms "
                  f"(1 thread, median of 7) -> {wall / fp32_s:.0f} inference-times ===")
            print("stages: " + ", ".join(f"{k} {v:.2f}" for k, v in report.timings.items()))
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                (Path(args.dump) / f"{Path(model).name}.{i + 1}.report.json").write_text(report.model_dump_json())
            if stats is None:
                continue
            print("calls:  " + ", ".join(f"{k} {v:.2f}" for k, v in key_seconds(stats).items() if v >= 0.005))
            if args.dump:
                stats.dump_stats(str(Path(args.dump) / f"{Path(model).name}.{i + 1}.prof"))
            if args.top:
                stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
