"""Cost of the per-tensor error table (``layers``, issue 15).

    python bench/layers.py [--models conv_relu,op_zoo_net,tiny_transformer,resnet18] [--samples 8] [--reps 3]

For each model, one comparison makes the four files (fp32 + three quantized) once; then, in this
warm process and alternating per rep, it times:

- ``plain``: what the evaluate stage already pays at ``disable_all``: one session per file, the
  samples run with the graph's own outputs only;
- ``layers``: ``layers_from_files`` on the same files and samples: every float activation
  exposed, alignment, accumulation, rows, origins.

The extra cost of the table is ``layers - plain`` (median of the reps); also printed: rows, the
share aligned across all three tools, process CPU time (ORT runs in this process with one
intra-op thread, so CPU time is what the work costs on a machine shared with other jobs, where
wall time is inflated), and the peak RSS growth over the reps.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUANTIZED = ("pt2e_qdq", "ort_qdq", "ort_qoperator")


def _plain(paths: dict[str, Path], feeds) -> float:
    from service.pipeline.ort.sessions import session_for

    t = time.perf_counter()
    for path in paths.values():
        s = session_for(path, "disable_all")
        names = {i.name for i in s.get_inputs()}
        for f in feeds:
            s.run(None, {k: v for k, v in f.items() if k in names})
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="conv_relu,op_zoo_net,tiny_transformer,resnet18")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    from service.pipeline.layers.layers import LayersBudget, layers_from_files
    from service.pipeline.inputs.samples import generated_samples
    from service.pipeline.inputs.sources import source_from_example
    from service.pipeline.inputs.specs import resolved_input_shapes

    print("| model | rows | aligned x3 | samples | plain s | layers s | extra s | layers / plain | CPU s plain / layers | RSS growth MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            options = ComparisonOptions(eval_samples=args.samples, calibration_samples=4, levels=["disable_all"],
                                        latency={"enabled": False})
            run_comparison(ComparisonRequest(example=model, options=options), Path(tmp))
            art = Path(tmp) / "artifacts"
            source = source_from_example(model)
            shapes, _ = resolved_input_shapes(source.specs, {})
            feeds = generated_samples(source.specs, shapes, options).evaluation
            files = {"fp32": art / "fp32.onnx", **{a: art / f"{a}.onnx" for a in QUANTIZED if (art / f"{a}.onnx").exists()}}
            plain, full, cpu_plain, cpu_full = [], [], [], []
            rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            for _ in range(args.reps):
                c = time.process_time()
                plain.append(_plain(files, feeds))
                cpu_plain.append(time.process_time() - c)
                c = time.process_time()
                t = time.perf_counter()
                report = layers_from_files(fp32_path=files["fp32"], artifact_paths={a: files[a] for a in QUANTIZED if a in files},
                                           eval_feeds=feeds, budget=LayersBudget(max_samples=args.samples))
                full.append(time.perf_counter() - t)
                cpu_full.append(time.process_time() - c)
            rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
            mp, mf = statistics.median(plain), statistics.median(full)
            cp, cf = statistics.median(cpu_plain), statistics.median(cpu_full)
            print(f"| {model} | {len(report.rows)} | {report.aligned_all_share:.0%} | {report.samples} | {mp:.3f} | {mf:.3f} | "
                  f"{mf - mp:.3f} | {mf / mp:.1f}x | {cp:.3f} / {cf:.3f} | {rss:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
