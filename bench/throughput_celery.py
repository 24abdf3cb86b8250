"""Throughput of the Celery executor with 1, 2 and 4 workers on this machine (jobs per minute).

    python bench/throughput_celery.py [--workers 1,2,4] [--jobs 12] [--example conv_relu] [--latency]

For each worker count: a fresh data directory, a `redis-server` on loopback, one API process
and N `quantcompare worker` processes (one warm pool process each), as the compose profile runs
them. A warm-up batch (2 jobs per worker) lets every pool process import the toolchain; then
``--jobs`` real comparisons (distinct seeds, so no cache hits) are submitted at once and timed
from the first submission to the last finish. Latency measurement is off unless ``--latency``
(it runs the models repeatedly and would measure the benchmark's own contention).

Not part of `make test`: it takes a few minutes and the numbers are this machine's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "celery"))

from cluster import Cluster, RedisServer  # noqa: E402


def run_jobs(cluster: Cluster, example: str, options: dict, seeds: range) -> tuple[float, list[dict]]:
    with cluster.api.client(timeout=60) as c:
        t0 = time.perf_counter()
        ids = []
        for seed in seeds:
            r = c.post("/v1/comparisons", json={"example": example, "options": {**options, "seed": seed}})
            r.raise_for_status()
            ids.append(r.json()["id"])
        jobs = [cluster.api.wait_job(job_id, timeout=1800) for job_id in ids]
        return time.perf_counter() - t0, jobs


def measure(root: Path, n_workers: int, n_jobs: int, example: str, options: dict, seed0: int) -> dict:
    redis = RedisServer(root / "redis").start()
    cluster = Cluster(root, redis.url(0), fault_jobs=False, cwd=root, workers=1, job_timeout_s=600)
    try:
        cluster.add_api()
        for _ in range(n_workers):
            cluster.add_worker()
        run_jobs(cluster, example, options, range(seed0, seed0 + 2 * n_workers))  # warm-up
        seconds, jobs = run_jobs(cluster, example, options, range(seed0 + 1000, seed0 + 1000 + n_jobs))
        failed = [j for j in jobs if j["status"] != "succeeded"]
        per_job = sorted(
            (j["report"]["timings"].get("total") or sum(j["report"]["timings"].values())) for j in jobs if j["report"])
        return {"workers": n_workers, "jobs": n_jobs, "failed": len(failed), "seconds": seconds,
                "jobs_per_min": 60.0 * (n_jobs - len(failed)) / seconds,
                "median_job_s": per_job[len(per_job) // 2] if per_job else float("nan")}
    finally:
        cluster.stop()
        redis.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    ap.add_argument("--jobs", type=int, default=12, help="timed jobs per worker count")
    ap.add_argument("--example", default="conv_relu")
    ap.add_argument("--latency", action="store_true", help="keep latency measurement on")
    args = ap.parse_args()
    options = {"calibration_samples": 4, "eval_samples": 2}
    if not args.latency:
        options["latency"] = {"enabled": False}
    counts = [int(x) for x in args.workers.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="qc-bench-celery-") as tmp:
        for i, n in enumerate(counts):
            print(f"... {n} worker(s)", file=sys.stderr, flush=True)
            rows.append(measure(Path(tmp) / f"w{n}", n, args.jobs, args.example, options, seed0=10_000 * (i + 1)))
    base = rows[0]["jobs_per_min"]
    print(f"\nCelery executor throughput: {args.example}, {args.jobs} jobs per row, latency "
          f"{'on' if args.latency else 'off'}, {os.cpu_count()} CPU(s)\n")
    print(f"| workers | jobs | failed | wall s | jobs/min | speed-up | median job s |")
    print(f"|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(f"| {r['workers']} | {r['jobs']} | {r['failed']} | {r['seconds']:.1f} | {r['jobs_per_min']:.1f} "
              f"| {r['jobs_per_min'] / base:.2f}x | {r['median_job_s']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
