"""What the measured advice (issue 14) costs in job time.

    python bench/advice_cost.py [--models conv_relu,op_zoo_net,yolo_style] [--budget 60]

Per model, one comparison in this process (latency on, the default 10 runs), with advice on:
the ``advice`` stage is timed on its own (``timings.advice``), so the job without it is the rest
of ``timings``. Per candidate: the seconds its re-run took (re-quantize with the cached ranges,
session, evaluation samples, alternated timing) and whether measurement supported it. Prints a
Markdown table; numbers depend on the machine and its load (2 shared cores here).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="conv_relu,op_zoo_net,yolo_style")
    ap.add_argument("--budget", type=float, default=60.0)
    args = ap.parse_args()

    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    print("| model | job s (without advice) | advice s | share | candidates re-run | proposed | refuted |")
    print("|---|---|---|---|---|---|---|")
    details = []
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            options = ComparisonOptions.model_validate({"advice": {"budget_seconds": args.budget}})
            report = run_comparison(ComparisonRequest(example=name, options=options), Path(tmp))
            wall = time.perf_counter() - t0
        adv = report.timings.get("advice", 0.0)
        entries = report.advice + report.advice_refuted
        rerun = [e for e in entries if e.measured]
        print(f"| {name} | {wall - adv:.1f} | {adv:.2f} | {adv / wall:.1%} | {len(rerun)} | "
              f"{len(report.advice)} | {len(report.advice_refuted)} |")
        for e in entries:
            m = e.measured
            if m is None:
                details.append(f"| {name} | {e.artifact} | {e.change} | not re-run | | | |")
                continue
            details.append(f"| {name} | {e.artifact} | {e.change} | {m.seconds:.2f} | "
                           f"{m.before.int8_coverage:.2f} -> {m.after.int8_coverage:.2f} | "
                           f"{m.before.latency_ms:.2f} -> {m.after.latency_ms:.2f} | "
                           f"{'proposed' if e.adopted else 'refuted'} |")
    print()
    print("| model | artifact | change | re-run s | int8 coverage | latency ms | outcome |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(details))


if __name__ == "__main__":
    main()
