"""What each target of options.platforms adds to a job (issue 49), and the host | target table it shows.

    python bench/targets.py [--example op_zoo_net] [--runs 3] [--targets qnn:69,openvino:cpu,ort:1.22.1]

Per run, one comparison per target in this process (warm: torch and ORT imported once), advice and the
per-tensor table off, latency at ``all`` as by default. "adds" is the median of the job's ``timings.platforms``
(the target's child process, its import, compile and runs, and reading its answer). Then the host | target table
of the last run: per artifact, status, nodes taken, worst SQNR here | there, latency there. Run it on an idle
machine: figures taken beside other work are noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _job(example: str, platforms: list[str] | None, seed: int):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = {"advice": {"enabled": False}, "layers": {"enabled": False}, "seed": seed}
    if platforms:
        options["platforms"] = platforms
    with tempfile.TemporaryDirectory(prefix="qc-bench-targets-") as d:
        t0 = time.perf_counter()
        report = run_comparison(ComparisonRequest(example=example, options=ComparisonOptions.model_validate(options)),
                                Path(d))
        return report, time.perf_counter() - t0


def _db(v) -> str:
    return "exact" if v is None else f"{v:.1f}"


def _rows(report, name: str) -> list[str]:
    p = report.platforms[name]
    out = []
    if p.kind in ("qnn", "openvino"):
        for artifact, art in p.artifacts.items():
            row = next(r for r in p.side_by_side if r.artifact == artifact)
            out.append(f"| {name} | {artifact} | {art.status} | "
                       f"{f'{art.nodes_taken}/{art.nodes_total}' if art.nodes_total else '-'} | "
                       f"{_db(row.host_sqnr_db)} / {_db(art.numerics.worst_sqnr_db) if art.numerics else '-'} | "
                       f"{f'{art.latency.median_ms:.3f}' if art.latency else 'not measured'} |")
        return out
    for artifact, art in p.artifacts.items():
        host = report.artifacts[artifact].optimized.get("all")
        out.append(f"| {name} | {artifact} | {art.status} | graphs at {', '.join(art.op_histogram)} | "
                   f"{_db(host.numerics.worst_sqnr_db if host and host.numerics else None)} / "
                   f"{_db(art.numerics.worst_sqnr_db) if art.numerics else '-'} | "
                   f"{f'{art.latency.median_ms:.3f}' if art.latency else '-'} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", default="op_zoo_net")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--targets", default="qnn:69,openvino:cpu,ort:1.22.1")
    ap.add_argument("--idle", type=float, default=0.5, help="wait for a 1-minute load under this before each job")
    args = ap.parse_args()
    targets = args.targets.split(",")
    from bench.job_budget import wait_idle

    _job(args.example, None, 0)  # warm-up: imports and the example's export
    base, added, last, loads = [], {t: [] for t in targets}, {}, {t: [] for t in targets}
    for i in range(args.runs):
        wait_idle(args.idle)
        base.append(_job(args.example, None, i + 1)[1])
        for t in targets:
            loads[t].append(wait_idle(args.idle))
            report, _ = _job(args.example, [t], i + 1)
            added[t].append(report.timings.get("platforms", 0.0))
            last[t] = report
    print(f"{args.example}: the job alone {statistics.median(base):.2f} s (median of {args.runs})\n")
    print("| target | adds to the job (s, median) | status | load before its jobs (highest) |")
    print("| --- | --- | --- | --- |")
    for t in targets:
        p = last[t].platforms[t]
        print(f"| {t} | {statistics.median(added[t]):.2f} | {p.status}{'' if p.error is None else ': ' + p.error.code} "
              f"| {max(loads[t]):.2f} |")
    print("\n| target | artifact | status | nodes taken | worst SQNR here / there (dB) | latency there (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for t in targets:
        if last[t].platforms[t].status == "ok":
            print("\n".join(_rows(last[t], t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
