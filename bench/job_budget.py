"""A default job's cost (issues 39, 47), side by side in one run: a warm service, its jobs timed from submission.

    python bench/job_budget.py [--models resnet18,center_net,detector960] [--out var/bench/job_budget]
                               [--one-core resnet18,center_net] [--by-hand] [--base CHECKOUT] [--idle 0.5]

Before each timed job the bench waits (up to 10 min) until the 1-minute load average is under --idle and
records it: a figure taken beside other work is noise. Per model, on a fresh `quantcompare serve` with
default settings (two workers, no QUANTCOMPARE_JOB_CORES: a lone job takes every core from the machine's
ledger), warm before the first timed job:
  - a `standard` job (the default options): wall time from the POST to `succeeded`, and when the first
    section (files + level graphs) was readable at GET /v1/comparisons/{id} (polled every 0.25 s);
    both in fp32 inference-times, one fp32 inference being the report's fp32 median at `all`;
  - a `structure` job, in the same unit;
  - the latency truth: the report's fp32.all and ort_qdq.all medians against an independent 7-run
    median (a fresh one-thread session on the job's own files, 3 untimed runs first);
  - with --one-core: the same `standard` job on a second server pinned to one CPU (`taskset -c 0`,
    QUANTCOMPARE_JOB_CORES=1), right after the first: the accuracy work (timings.evaluate) on the default's
    cores / on 1;
  - what the extras reached: advice candidates measured, the per-tensor table's samples and whether its
    ranking settled, the budget (report.extras);
  - with --base: the same job on a third server running the commit before issue 39 (its default job:
    latency at every level, accuracy on one core), right after;
  - with --by-hand (examples only): bench/by_hand.py making the same figures (accuracy at five levels,
    latency at `all`), its wall time against the service's.
Raw JSON per model under --out; `python bench/job_budget.py --table DIR` prints the Markdown table.
The base server runs the other checkout's ``service`` on PYTHONPATH, ahead of this venv's editable install.
Jobs are alternated model by model (head, one core, base, structure) so that each comparison shares the
machine's load of the moment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
QC = str(Path(PY).parent / "quantcompare")
WHEELS = ROOT / "var" / "bench" / "wheels"


def log(msg: str) -> None:
    print(f"[job_budget {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def models() -> dict:
    from bench.run import bench_options

    out = {"resnet18": {"example": "resnet18", "options": bench_options("resnet18")}}
    cn = WHEELS / "cycle_center_net_v1.onnx"
    if cn.exists():
        out["center_net"] = {"file": cn, "options": {"input_shapes": {"input": [1, 3, 512, 512]}}}
    try:
        sys.path.insert(0, str(ROOT / "tests" / "realworld"))
        from corpus import BY_NAME

        m = BY_NAME["ppocr_v4_det"]
        out["detector960"] = {"file": m.locate(Path("/tmp")),
                              "options": {**m.options, "input_shapes": {"x": [1, 3, 960, 960]}}}
    except Exception as e:  # noqa: BLE001 - the wheel is a test extra: measured when it is there
        log(f"no PP-OCRv4 detector: {e}")
    return out


class Server:
    def __init__(self, work: Path, *, cores: int | None, pin: str | None = None, src: str | None = None):
        self.data = (work / f"server-{cores or 'default'}core").resolve()  # the server's cwd is ``work``
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(parents=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUANTCOMPARE_")}
        env.update(QUANTCOMPARE_DATA_DIR=str(self.data), QUANTCOMPARE_CORES_LEDGER=str(self.data / "ledger"),
                   QUANTCOMPARE_LOG_LEVEL="warning", QUANTCOMPARE_JOB_TIMEOUT_S="7200", PYTHONWARNINGS="ignore")
        if cores is not None:
            env.update(QUANTCOMPARE_JOB_CORES=str(cores), QUANTCOMPARE_WORKERS="1")
        if src:
            env["PYTHONPATH"] = str(Path(src).resolve())
        cmd = [QC, "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        if pin:
            cmd = ["taskset", "-c", pin] + cmd
        self._log = open(work / f"server-{cores or 'default'}core.log", "w")
        self.proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        import httpx

        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=httpx.Timeout(600.0, connect=5.0))
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited")
            with contextlib.suppress(Exception):
                if self.http.get("/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("no /healthz within 180 s")
            time.sleep(0.2)

    def job(self, spec: dict, options: dict, idle: float | None = None) -> dict:
        """Submit (once the machine is idle, when ``idle`` is given), poll every 0.25 s; the wall time to the
        first partial section and to the end."""
        load = wait_idle(idle) if idle is not None else os.getloadavg()[0]
        t0 = time.perf_counter()
        if "example" in spec:
            r = self.http.post("/v1/comparisons", json={"example": spec["example"], "options": options})
        else:
            with open(spec["file"], "rb") as fh:
                r = self.http.post("/v1/comparisons", files={"model": (Path(spec["file"]).name, fh)},
                                   data={"options": json.dumps(options)})
        r.raise_for_status()
        job_id = r.json()["id"]
        first = None
        sections: dict[str, float] = {}
        while True:
            job = self.http.get(f"/v1/comparisons/{job_id}").json()
            now = time.perf_counter() - t0
            report = job.get("report") or {}
            for s in report.get("sections_done") or []:
                sections.setdefault(s, round(now, 2))
            if first is None and "level_graphs" in (report.get("sections_done") or []):
                first = now
            if job["status"] in ("succeeded", "failed"):
                break
            time.sleep(0.25)
        if job["status"] != "succeeded":
            raise RuntimeError(f"job {job_id} failed: {json.dumps(job.get('error'))[:1000]}")
        return {"id": job_id, "wall_s": time.perf_counter() - t0, "first_section_s": first, "sections_s": sections,
                "report": job["report"], "job_dir": str(self.data / "jobs" / job_id), "load_before": load}

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def wait_idle(below: float, limit_s: float = 600.0) -> float:
    """The 1-minute load average once it is under ``below`` (or after ``limit_s``, said in the log)."""
    deadline = time.monotonic() + limit_s
    while (load := os.getloadavg()[0]) >= below and time.monotonic() < deadline:
        time.sleep(5)
    if load >= below:
        log(f"load still {load:.2f} after {limit_s:.0f} s: measuring anyway, the figure is marked")
    return load


def latency_truth(job: dict) -> dict:
    import numpy as np

    from tests.latency_oracle import independent_median

    report, art = job["report"], Path(job["job_dir"]) / "artifacts"
    shapes = report["model"]["resolved_input_shapes"]
    dtypes = {i["name"]: i["dtype"] for i in report["model"]["inputs"]}
    rng = np.random.default_rng(1)
    feed = {k: rng.standard_normal(v).astype(dtypes.get(k, "float32")) for k, v in shapes.items()}
    out = {}
    for name in ("fp32", "ort_qdq"):
        lat = ((report["artifacts"].get(name) or {}).get("optimized", {}).get("all") or {}).get("latency")
        if not lat or not (art / f"{name}.onnx").exists():
            continue
        ind = independent_median(art / f"{name}.onnx", feed)
        out[f"{name}.all"] = {"report_ms": lat["median_ms"], "independent_7run_ms": ind,
                              "ratio": lat["median_ms"] / ind, "noisy": lat.get("noisy"),
                              "noisy_reasons": lat.get("noisy_reasons")}
    return out


def fp32_ms(report: dict) -> float | None:
    lat = report["artifacts"]["fp32"]["optimized"].get("all", {}).get("latency")
    return lat["median_ms"] if lat else None


def summary(job: dict, ms: float | None) -> dict:
    r = job["report"]
    t = r.get("timings") or {}
    return {"id": job["id"], "wall_s": round(job["wall_s"], 2), "first_section_s": job["first_section_s"] and round(job["first_section_s"], 2),
            "inference_times": ms and round(job["wall_s"] * 1000 / ms, 1),
            "first_section_inference_times": ms and job["first_section_s"] and round(job["first_section_s"] * 1000 / ms, 1),
            "report_job_seconds": (r.get("cost") or {}).get("job_seconds"), "timings": t, "sections_s": job["sections_s"],
            "accuracy_s": round(t.get("evaluate", 0), 3), "load_before": job.get("load_before"),
            "advice_not_run": len(r.get("advice_not_run") or []),
            "advice_measured": sum(1 for e in (r.get("advice") or []) + (r.get("advice_refuted") or []) if e.get("measured")),
            "table_samples": (r.get("layers") or {}).get("samples"),
            "table_ranking": ((r.get("layers") or {}).get("sampling") or {}).get("ranking"),
            "extras": r.get("extras"), "job_cores": r.get("job_cores"),
            "paths": {n: a["status"] for n, a in r["artifacts"].items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,center_net,detector960")
    ap.add_argument("--out", default=str(ROOT / "var" / "bench" / "job_budget"))
    ap.add_argument("--idle", type=float, default=0.5, help="wait for a 1-minute load under this before each job")
    ap.add_argument("--one-core", default="", help="comma-separated models also run on the 1-core server")
    ap.add_argument("--by-hand", action="store_true")
    ap.add_argument("--base", help="a checkout of the commit before issue 39: its default job, alternated")
    ap.add_argument("--table")
    args = ap.parse_args(argv)
    if args.table:
        print(table(Path(args.table)))
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    specs = models()
    wanted = [m for m in args.models.split(",") if m in specs]
    one_core = [m for m in args.one_core.split(",") if m in wanted]
    log(f"models {wanted}; one core: {one_core}; load {os.getloadavg()}")
    # Every server up (and warm) before the first timed job, and their jobs alternated model by model: on
    # a machine shared with other work the load moves within minutes, so only figures measured side by side
    # compare.
    servers = {"head": Server(out, cores=None)}
    if one_core:
        servers["one_core"] = Server(out, cores=1, pin="0")
    if args.base:
        servers["base"] = Server(out / "base", cores=2, src=args.base)
    try:
        for server in servers.values():
            server.job({"example": "conv_relu"}, {"levels": ["all"], "seed": 99})  # warm the worker
        for name in wanted:
            spec, opts = specs[name], specs[name]["options"]
            row: dict = {"model": name, "load_before": os.getloadavg(), "commit": _commit()}
            log(f"{name}: standard")
            std = servers["head"].job(spec, {**opts, "seed": 0}, idle=args.idle)
            ms = fp32_ms(std["report"])
            row["fp32_ms"] = ms
            row["standard"] = summary(std, ms)
            row["latency_truth"] = latency_truth(std)
            _save(out, row)
            if name in one_core:
                log(f"{name}: standard on one core")
                row["one_core"] = summary(servers["one_core"].job(spec, {**opts, "seed": 0}, idle=args.idle), ms)
                row["accuracy_2_vs_1"] = (row["standard"]["accuracy_s"] / row["one_core"]["accuracy_s"]
                                          if row["one_core"]["accuracy_s"] else None)
                _save(out, row)
            if "base" in servers:
                log(f"{name}: base")
                base = servers["base"].job(spec, {**opts, "seed": 0}, idle=args.idle)
                row["base"] = summary(base, fp32_ms(base["report"]))
                _save(out, row)
            log(f"{name}: structure")
            row["structure"] = summary(servers["head"].job(spec, {**opts, "seed": 1, "depth": "structure"},
                                                           idle=args.idle), ms)
            row["load_after"] = os.getloadavg()
            _save(out, row)
            if args.by_hand and "example" in spec:
                wait_idle(args.idle)
                row["by_hand"] = by_hand(spec["example"], opts, out)
                _save(out, row)
            log(f"{name}: fp32 {ms} ms; standard {row['standard']['inference_times']}, structure "
                f"{row['structure']['inference_times']}, first {row['standard']['first_section_inference_times']}, "
                f"accuracy 2/1 {row.get('accuracy_2_vs_1')}, base {(row.get('base') or {}).get('inference_times')}")
    finally:
        for server in servers.values():
            server.stop()
    print(table(out))
    return 0


def _save(out: Path, row: dict) -> None:
    (out / f"{row['model']}.json").write_text(json.dumps(row, indent=1))


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def by_hand(example: str, opts: dict, out: Path) -> dict:
    from bench.run import default_counts

    counts = default_counts(opts)
    work = out / f"by_hand.{example}"
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    p = subprocess.run([PY, str(ROOT / "bench" / "by_hand.py"), "--example", example, "--out", str(work), "--json",
                        "--calibration-samples", str(counts["calibration_samples"]),
                        "--eval-samples", str(counts["eval_samples"]), "--latency-runs", str(counts["latency_runs"]),
                        "--latency-warmup", str(counts["latency_warmup"]), "--latency-levels", "all"],
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    return {"wall_s": round(wall, 2), "steps": json.loads(p.stdout.strip().splitlines()[-1])["steps"]}


def table(folder: Path) -> str:
    """One row per model. The unit of job time is one fp32 inference as the independent 7-run median measures
    it after the standard job (the report's own median is timed during the job and marked noisy when the
    machine was busy); seconds are wall times from the POST."""
    rows = [r for r in (json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))) if "standard" in r]
    lines = ["| model | fp32 ms (independent; report's) | standard job, inference-times (s) | job cores | advice "
             "measured / not run | table samples, ranking | base's default job, alternated | structure job | first "
             "section readable | accuracy (evaluate) default / 1 core | latency / independent 7-run median "
             "(fp32.all, ort_qdq.all) | standard / by hand | load before (standard, 1 core, structure) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        truth = r.get("latency_truth", {})
        unit = (truth.get("fp32.all") or {}).get("independent_7run_ms") or r["fp32_ms"]

        def it(seconds):
            return f"{seconds * 1000 / unit:.0f} ({seconds:.1f} s)" if seconds else "-"

        s, st, b = r["standard"], r.get("structure") or {}, r.get("base") or {}
        ratios = ", ".join(f"{v['ratio']:.2f}{' (flagged noisy)' if v['noisy'] else ''}" for v in truth.values())
        acc = (f"{r['accuracy_2_vs_1']:.2f}x ({s['accuracy_s']:.1f} / {r['one_core']['accuracy_s']:.1f} s)"
               if r.get("accuracy_2_vs_1") else "-")
        hand = (f"{s['wall_s'] / r['by_hand']['wall_s']:.2f}x ({s['wall_s']:.1f} / {r['by_hand']['wall_s']:.1f} s)"
                if r.get("by_hand") else "-")
        first = it(s["first_section_s"]) if s.get("first_section_s") else "at the end"
        cores = (s.get("job_cores") or {}).get("cores", "-")
        ranking = "settled" if "ranking settled" in (s.get("table_ranking") or "") else "not settled"
        loads = ", ".join(f"{x:.2f}" for x in (s.get("load_before"), (r.get("one_core") or {}).get("load_before"),
                                                st.get("load_before")) if x is not None)
        lines.append(f"| {r['model']} | {unit:.1f}; {r['fp32_ms']:.1f} | {it(s['wall_s'])} | {cores} | "
                     f"{s.get('advice_measured', '-')} / {s.get('advice_not_run', '-')} | "
                     f"{s.get('table_samples', '-')}, {ranking} | {it(b.get('wall_s'))} | "
                     f"{it(st.get('wall_s'))} | {first} | {acc} | {ratios} | {hand} | {loads} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
