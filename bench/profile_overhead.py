"""What ORT's profiler costs on a real-size model (issue 51): the profiled run against the timed median.

Usage (on an idle machine): .venv/bin/python bench/profile_overhead.py [corpus name, default nudenet_320n] [--repeat N]

Runs the job (levels disable_all and all, advice and the per-tensor table off) for its files, waits until
the 1-minute load is under ``--idle`` (the job's own work raised it), then per artifact at ``all``, side by
side: the timed median by the job's latency protocol (``latency_alone``, one intra-op thread, a fresh
session) and ``--repeat`` profiled runs (``runtime/profile.profile_of``, each on a session of its own).
Prints the timed median, the median profiled run, the overhead, ORT's total for the run, and how much of
it the node times cover, with the load before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="nudenet_320n")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--idle", type=float, default=0.5, help="wait for a 1-minute load under this before measuring")
    args = ap.parse_args()

    from service.pipeline.compare import ComparisonRequest, run_comparison
    from bench.job_budget import wait_idle
    from service.pipeline.ort.sessions import session_for
    from service.pipeline.runtime.latency import LatencyBudget, latency_alone, latency_protocol_from_options
    from service.pipeline.runtime.profile import profile_of
    from service.schemas.options import ComparisonOptions
    from tests.realworld.corpus import BY_NAME

    model = BY_NAME[args.model]
    work = Path(tempfile.mkdtemp(prefix="qc-profile-bench-"))
    path = model.locate(work / "built")
    options = ComparisonOptions.model_validate(model.options_with(
        latency={"enabled": True, "runs": 30, "min_runs": 10}, latency_levels=["all"], levels=["disable_all", "all"],
        advice={"enabled": False}, layers={"enabled": False}))
    report = run_comparison(ComparisonRequest(model_path=path, model_name=model.name, options=options), work / "job")
    art_dir = work / "job" / "artifacts"
    # The job's own conversion and quantization just kept a core busy: the figures below are taken once the
    # 1-minute load is back under --idle, the timed median and the profiled runs side by side on fresh sessions.
    load = wait_idle(args.idle)
    protocol = latency_protocol_from_options(options.latency)
    print(f"model {model.name}: {report.model.node_count} nodes; load average {load:.2f} before the figures")
    print(f"{'artifact':<15}{'timed median ms':>16}{'profiled ms':>13}{'overhead':>10}{'ORT total ms':>14}"
          f"{'nodes/total':>13}  where it loses")
    for name, art in report.artifacts.items():
        if art.status != "ok":
            print(f"{name:<15}{'-':>16}  (not timed: {art.status})")
            continue
        feed, path = _feed(report, art_dir), art_dir / f"{name}.onnx"
        latency = latency_alone(session_for(path, "all", intra_op_threads=1), feed, protocol,
                                LatencyBudget(protocol.budget_seconds, 1))
        profiles = [profile_of(path, "all", feed, threads=1, median_ms=latency.median_ms) for _ in range(args.repeat)]
        prof = statistics.median(pr.profiled_run_ms for pr in profiles)
        p = profiles[-1]
        print(f"{name:<15}{latency.median_ms:>16.3f}{prof:>13.3f}{prof / latency.median_ms - 1:>10.1%}"
              f"{p.total_ms:>14.3f}{p.kernels_ms / p.total_ms:>13.1%}  {p.where_it_loses or '-'}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def _feed(report, art_dir: Path) -> dict:
    """An input of the resolved shapes (the profiler's overhead does not depend on the values)."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(art_dir / "fp32.onnx"), providers=["CPUExecutionProvider"])
    types = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
    rng = np.random.default_rng(0)
    feed = {}
    for i in sess.get_inputs():
        shape = report.model.resolved_input_shapes.get(i.name) or [d if isinstance(d, int) else 1 for d in i.shape]
        feed[i.name] = rng.standard_normal(shape).astype(types.get(i.type, np.float32))
    return feed


if __name__ == "__main__":
    main()
