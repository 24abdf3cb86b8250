"""Which way should untimed accuracy runs use a job's cores? (issue 39)

    python bench/accuracy_cores.py ARTIFACTS_DIR [--cores 2] [--feeds 8] [--json var/accuracy_cores.json]

For each of fp32.onnx, ort_qdq.onnx and ort_qoperator.onnx in ARTIFACTS_DIR (e.g. a `quantcompare compare
--out DIR` run's artifacts), at level ``all``, the evaluation-style loop over FEEDS random feeds, timed
three ways, alternated per round so load from other processes falls on all of them alike:

  one       one session, one intra-op thread, feeds one after the other (the old accuracy runs)
  intra     one session with CORES intra-op threads, feeds one after the other
  parallel  one session with one intra-op thread, CORES feeds at once from CORES threads
            (runtime/parallel_runs.runs_on_cores: what the levels stage does)

and whether each way's outputs are bit for bit the one-thread outputs, and the cores each way kept busy
(process CPU seconds / wall seconds). Prints a table; raw JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.pipeline.ort.sessions import session_for  # noqa: E402
from service.pipeline.runtime.parallel_runs import runs_on_cores  # noqa: E402


def feeds_for(session, n: int):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        feed = {}
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
        out.append(feed)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("artifacts")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--feeds", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    for name in ("fp32", "ort_qdq", "ort_qoperator"):
        path = Path(args.artifacts) / f"{name}.onnx"
        if not path.exists():
            continue
        one = session_for(path, "all", intra_op_threads=1)
        intra = session_for(path, "all", intra_op_threads=args.cores)
        feeds = feeds_for(one, args.feeds)
        ways = {
            "one": lambda: [one.run(None, f) for f in feeds],
            "intra": lambda: [intra.run(None, f) for f in feeds],
            "parallel": lambda: runs_on_cores(lambda f: one.run(None, f), feeds, args.cores),
        }
        for w in ways.values():  # warm each session
            w()
        times = {k: [] for k in ways}
        cpu = {k: [] for k in ways}  # process CPU seconds / wall seconds: how many cores the way kept busy
        outs = {}
        for _ in range(args.rounds):
            for k, w in ways.items():
                c0, t0 = time.process_time(), time.perf_counter()
                outs[k] = w()
                wall = time.perf_counter() - t0
                times[k].append(wall)
                cpu[k].append((time.process_time() - c0) / wall)
        same = {k: all(np.array_equal(a, b) for ra, rb in zip(outs["one"], outs[k]) for a, b in zip(ra, rb))
                for k in ways}
        row = {"artifact": name, "feeds": args.feeds, "cores": args.cores,
               "seconds": {k: float(np.median(v)) for k, v in times.items()}, "bitwise_equal_to_one": same,
               "cores_busy": {k: round(float(np.median(v)), 2) for k, v in cpu.items()},
               "load_avg_1m": os.getloadavg()[0]}
        row["ratio_vs_one"] = {k: row["seconds"][k] / row["seconds"]["one"] for k in ways}
        rows.append(row)
        print(f"{name:<14} one {row['seconds']['one']:.2f}s  intra {row['seconds']['intra']:.2f}s "
              f"({row['ratio_vs_one']['intra']:.2f}x, equal {same['intra']})  parallel {row['seconds']['parallel']:.2f}s "
              f"({row['ratio_vs_one']['parallel']:.2f}x, equal {same['parallel']})  cores busy {row['cores_busy']}  "
              f"load {row['load_avg_1m']:.1f}",
              flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "cpu_count": os.cpu_count()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
