"""``make bench``: quantcompare vs. doing it by hand, measured side by side (issue 8).

    python bench/run.py [--models conv_relu,op_zoo_net,resnet18,tiny_transformer] [--runs 3]
                        [--quick] [--smoke] [--no-service] [--no-extras] [--record | --no-record]
                        [--json PATH] [--from-json PATH]

Per model, each run does, one after another (interleaved, so load drift hits all three alike):
  by hand   ``bench/by_hand.py`` in a fresh Python process (the chapter's method, public APIs only);
  CLI       ``quantcompare compare --example NAME`` in a fresh process;
  service   ``POST /v1/comparisons?wait=`` to a running ``quantcompare serve`` (warm workers);
then ``repeat``: the same submission again (the stored result). Each cell is the median of
``--runs`` runs; the ratios service/by-hand and CLI/by-hand are medians of per-run ratios.
Peak RSS is polled with psutil (by hand and CLI: the process; service: the worker process tree).
Service runs use seeds 1000+i so that no run is a cache hit; the work is the same for any seed.

Extras, once per bench run: /healthz p99 while two comparisons run; the API process's RSS growth
while a 200 MB ONNX model is uploaded; PT2E calibration cost vs plain fp32 forward passes
(``bench/calibration.py``). Everything binds to 127.0.0.1 only.

``--quick``: conv_relu and op_zoo_net, 1 run. ``--smoke``: conv_relu once with tiny counts, by hand
and CLI only (what ``tests/bench/test_bench_smoke.py`` runs). A full default run (all models, no
``--models``/``--quick``/``--smoke``) writes ``var/bench/run/RESULTS.md`` (the tables) and ``RESULTS.json``
(the raw figures) unless ``--no-record``; ``bench/RESULTS.md`` keeps the current table, copied from there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
OUT = ROOT / "var" / "bench" / "run"  # raw output: var/ is not in git
PY = sys.executable
QC = str(Path(PY).with_name("quantcompare"))
ALL_MODELS = ["conv_relu", "op_zoo_net", "resnet18", "tiny_transformer"]
CALIBRATION = {"resnet18": 32}  # issue 8: resnet18 with 32 calibration samples; others the default (16)
TARGET_SERVICE_RATIO = {"conv_relu": 0.5, "op_zoo_net": 0.5, "resnet18": 0.8}
TARGET_REPEAT_MS = 50.0
TARGET_HEALTHZ_P99_MS = 50.0
TARGET_UPLOAD_RSS_MB = 50.0
UPLOAD_MB = 200
MIB = 1024 * 1024


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def bench_options(model: str, *, smoke: bool = False) -> dict:
    """The service's defaults (ComparisonOptions), but resnet18 with 32 calibration samples."""
    if smoke:
        return {"calibration_samples": 2, "eval_samples": 1, "latency": {"runs": 1, "warmup": 0}}
    return {"calibration_samples": CALIBRATION[model]} if model in CALIBRATION else {}


def default_counts(opts: dict) -> dict:
    """The counts by_hand.py must use: read from ComparisonOptions so the two never drift apart."""
    sys.path.insert(0, str(ROOT))
    from service.schemas.options import ComparisonOptions

    o = ComparisonOptions(**opts)
    return {"calibration_samples": o.calibration_samples, "eval_samples": o.eval_samples,
            "latency_runs": o.latency.runs if o.latency.enabled else 0, "latency_warmup": o.latency.warmup}


class PeakRss:
    """Poll the RSS of a process tree (or of chosen processes) in a thread; keep the peak in MiB."""

    def __init__(self, pids_fn, every: float = 0.05):
        self._pids_fn = pids_fn
        self._every = every
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        total = 0
        for pid in self._pids_fn():
            with contextlib.suppress(psutil.Error):
                total = max(total, tree_rss(pid))
        self.peak_mb = max(self.peak_mb, total / MIB)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self._every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def tree_rss(pid: int) -> int:
    p = psutil.Process(pid)
    rss = p.memory_info().rss
    for c in p.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            rss += c.memory_info().rss
    return rss


def run_process(cmd: list[str], *, cwd: Path, timeout: float = 1800) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of one fresh process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    holder: dict = {}
    reader = threading.Thread(target=lambda: holder.update(zip(("out", "err"), proc.communicate(timeout=timeout))))
    with PeakRss(lambda: [proc.pid]) as rss:
        reader.start()
        reader.join()
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1):  # 1 = a gate failed: still a finished comparison
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited {proc.returncode}:\n{holder.get('err', '')[-3000:]}")
    return wall, rss.peak_mb, holder.get("out", "")


def by_hand_once(model: str, opts: dict, work: Path) -> dict:
    counts = default_counts(opts)
    out = work / f"by_hand.{model}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [PY, str(BENCH / "by_hand.py"), "--example", model, "--out", str(out), "--json",
           "--calibration-samples", str(counts["calibration_samples"]), "--eval-samples", str(counts["eval_samples"]),
           "--latency-runs", str(counts["latency_runs"]), "--latency-warmup", str(counts["latency_warmup"])]
    wall, rss, stdout = run_process(cmd, cwd=work)
    info = json.loads(stdout.strip().splitlines()[-1])
    shutil.rmtree(out, ignore_errors=True)
    return {"wall": wall, "rss_mb": rss, "steps": info["steps"], "sqnr_all": info["sqnr_all"], "stdout": stdout}


def cli_once(model: str, opts: dict, work: Path) -> dict:
    out = work / f"cli.{model}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [QC, "compare", "--example", model, "--out", str(out), "-q"]
    if opts:
        cmd += ["--options", json.dumps(opts)]
    wall, rss, stdout = run_process(cmd, cwd=work)
    report = json.loads((out / "report.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return {"wall": wall, "rss_mb": rss, "timings": report["timings"], "stdout": stdout,
            "sqnr_all": _sqnr_all(report)}


def _sqnr_all(report: dict) -> dict:
    out = {}
    for name, art in report.get("artifacts", {}).items():
        lv = ((art.get("optimized") or {}).get("all") or {})
        out[name] = ((lv.get("numerics") or {}).get("worst_sqnr_db")) if art.get("status") == "ok" else None
    return out


# --- the service -----------------------------------------------------------------------------------

class Server:
    """``quantcompare serve`` on a free loopback port with its own data dir; stopped by pid only."""

    def __init__(self, work: Path, workers: int = 2):
        self.data = work / "server-data"
        shutil.rmtree(self.data, ignore_errors=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUANTCOMPARE_")}
        env.update(QUANTCOMPARE_LOG_LEVEL="warning", QUANTCOMPARE_WORKERS=str(workers),
                   QUANTCOMPARE_DATA_DIR=str(self.data), PYTHONWARNINGS="ignore")
        self.log_path = work / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([QC, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                                     cwd=work, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        import httpx

        self.http = httpx.Client(base_url=self.base, timeout=httpx.Timeout(1800.0, connect=5.0))
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(Exception):
                if self.http.get("/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not answer /healthz within 120 s")
            time.sleep(0.2)

    def worker_pids(self) -> list[int]:
        with contextlib.suppress(psutil.Error):
            return [c.pid for c in psutil.Process(self.proc.pid).children()]
        return []

    def submit(self, model: str, opts: dict, *, wait: float = 1800) -> tuple[float, dict]:
        t = time.perf_counter()
        r = self.http.post("/v1/comparisons", params={"wait": wait}, json={"example": model, "options": opts})
        wall = time.perf_counter() - t
        if r.status_code != 200:
            raise RuntimeError(f"POST /v1/comparisons -> {r.status_code}: {r.text[:2000]}")
        job = r.json()
        if job["status"] != "succeeded":
            raise RuntimeError(f"job {job['id']} {job['status']}: {json.dumps(job.get('error'))[:2000]}")
        return wall, job

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM to the server we started; it stops its own workers
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                for c in psutil.Process(self.proc.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        c.kill()
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def service_once(server: Server, model: str, opts: dict, seed: int) -> dict:
    body = {**opts, "seed": seed}
    with PeakRss(server.worker_pids) as rss:
        wall, job = server.submit(model, body)
    if job.get("cached"):
        raise RuntimeError("a measured service run was a cache hit: the bench's data dir is not fresh")
    report = job["report"]
    t = time.perf_counter()
    _, again = server.submit(model, body)
    repeat = time.perf_counter() - t
    if job.get("status") != "succeeded":
        raise RuntimeError(f"a measured service run did not succeed: {job.get('status')}: {job.get('error')}")
    return {"wall": wall, "rss_mb": rss.peak_mb, "timings": report["timings"], "repeat_s": repeat,
            "repeat_cached": bool(again.get("cached")) and again.get("id") == job.get("id"),
            "sqnr_all": _sqnr_all(report), "levels_reused": levels_reused(report)}


def levels_reused(report: dict) -> int:
    """Levels the service did not run again because ORT's graph equals an earlier level's
    (``same_graph_as``); by_hand.py runs every level. The two differ by this much work."""
    return sum(1 for art in report.get("artifacts", {}).values()
               for lv in (art.get("optimized") or {}).values() if lv.get("same_graph_as"))


def healthz_under_load(server: Server, model: str, opts: dict, seeds=(9001, 9002), max_requests: int = 20000,
                       max_seconds: float = 900) -> dict:
    """Two comparisons at once, /healthz polled (bounded) until both finish."""
    results: list = []

    def submit(seed):
        try:
            _, job = server.submit(model, {**opts, "seed": seed})
            results.append(job.get("status"))
        except Exception as e:  # counted as a job that did not succeed
            results.append(f"error: {e}"[:300])

    threads = [threading.Thread(target=submit, args=(s,), daemon=True) for s in seeds]
    for th in threads:
        th.start()
    time.sleep(0.5)  # let both reach the workers
    import httpx

    lat, codes = [], {}
    deadline = time.monotonic() + max_seconds
    with httpx.Client(base_url=server.base, timeout=10) as c:
        while any(th.is_alive() for th in threads) and len(lat) < max_requests and time.monotonic() < deadline:
            t = time.perf_counter()
            try:
                r = c.get("/healthz")
                code = str(r.status_code) if r.json() == {"status": "ok"} else f"{r.status_code} {r.text[:80]}"
            except Exception as e:  # a refused or timed-out probe is an answer too, and not a good one
                code = type(e).__name__
            lat.append((time.perf_counter() - t) * 1000)
            codes[code] = codes.get(code, 0) + 1
            time.sleep(0.01)
    for th in threads:
        th.join(timeout=max_seconds)
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None  # noqa: E731
    return {"model": model, "requests": len(lat), "p50_ms": p(0.50), "p99_ms": p(0.99), "max_ms": lat[-1] if lat else None,
            "jobs_finished": len(results), "jobs_submitted": len(seeds),
            "jobs_succeeded": results.count("succeeded"), "job_outcomes": results, "healthz_answers": codes}


def healthz_met(h: dict) -> bool:
    """Met only when both jobs succeeded, every probe answered 200 {"status": "ok"}, and p99 is in."""
    return (h.get("p99_ms") is not None and h["p99_ms"] <= TARGET_HEALTHZ_P99_MS
            and h.get("jobs_submitted", 2) == h.get("jobs_succeeded") and bool(h.get("requests"))
            and set(h.get("healthz_answers") or {"missing": 1}) == {"200"})


def upload_met(u: dict) -> bool:
    """Met only when the server accepted the upload (200 or 202) and the API grew less than the target."""
    return u.get("status") in (200, 202) and u.get("growth_mb") is not None and u["growth_mb"] < TARGET_UPLOAD_RSS_MB


def big_onnx(path: Path, mb: int = UPLOAD_MB) -> Path:
    """x[batch, 1024] @ W[1024, N] + a Relu: a valid ONNX file of ~mb MiB, built in code."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = mb * MIB // (1024 * 4)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((1024, n), dtype=np.float32) * 0.01, "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1024])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", n])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def upload_rss(server: Server, work: Path) -> dict:
    """API process RSS (workers excluded) while a 200 MiB model is uploaded, streamed from disk."""
    path = big_onnx(work / "big.onnx")
    size_mb = path.stat().st_size / MIB
    api = psutil.Process(server.proc.pid)
    time.sleep(0.5)
    before = api.memory_info().rss / MIB
    # Cheapest job the upload can start: one ORT artifact, one level, no latency; we only watch the API.
    opts = {"artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 1, "eval_samples": 1,
            "latency": {"enabled": False}}
    with open(path, "rb") as f:
        peak = [before]  # the API process alone (tree_rss would add the workers)
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                with contextlib.suppress(psutil.Error):
                    peak[0] = max(peak[0], api.memory_info().rss / MIB)
                stop.wait(0.02)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        t = time.perf_counter()
        r = server.http.post("/v1/comparisons", files={"model": ("big.onnx", f, "application/octet-stream")},
                             data={"options": json.dumps(opts)})
        secs = time.perf_counter() - t
        time.sleep(0.3)
        stop.set()
        th.join()
    after = api.memory_info().rss / MIB
    path.unlink(missing_ok=True)
    return {"model_mb": round(size_mb, 1), "status": r.status_code, "upload_s": secs, "rss_before_mb": before,
            "rss_peak_mb": peak[0], "rss_after_mb": after, "growth_mb": peak[0] - before}


def calibration_rows(models: list[str], work: Path) -> list[dict]:
    cmd = [PY, str(BENCH / "calibration.py"), "--models", ",".join(models), "--json"]
    _, _, out = run_process(cmd, cwd=work)
    return json.loads(out.strip().splitlines()[-1])


# --- tables ----------------------------------------------------------------------------------------

def fmt(v, spec=".2f", none="-"):
    return none if v is None else format(v, spec)


def summarize(model: str, runs: list[dict]) -> dict:
    bh = [r["by_hand"] for r in runs]
    cli = [r["cli"] for r in runs if "cli" in r]
    svc = [r["service"] for r in runs if "service" in r]
    row = {
        "model": model, "runs": len(runs),
        "by_hand_s": median([r["wall"] for r in bh]), "cli_s": median([r["wall"] for r in cli]),
        "service_s": median([r["wall"] for r in svc]),
        "repeat_ms": median([r["repeat_s"] * 1000 for r in svc]),
        "repeat_cached": all(r["repeat_cached"] for r in svc) if svc else None,
        "cli_ratio": median([r["cli"]["wall"] / r["by_hand"]["wall"] for r in runs if "cli" in r]),
        "service_ratio": median([r["service"]["wall"] / r["by_hand"]["wall"] for r in runs if "service" in r]),
        "rss_by_hand_mb": median([r["rss_mb"] for r in bh]), "rss_cli_mb": median([r["rss_mb"] for r in cli]),
        "rss_worker_mb": max([r["rss_mb"] for r in svc], default=None),
        "by_hand_steps": {k: median([r["steps"].get(k) for r in bh]) for k in bh[0]["steps"]} if bh else {},
        "cli_timings": {k: median([r["timings"].get(k) for r in cli]) for k in (cli[0]["timings"] if cli else {})},
        "service_timings": {k: median([r["timings"].get(k) for r in svc]) for k in (svc[0]["timings"] if svc else {})},
        "sqnr_all": {"by_hand": bh[-1]["sqnr_all"] if bh else None, "cli": cli[-1]["sqnr_all"] if cli else None},
        "levels_reused": max([r.get("levels_reused", 0) for r in svc], default=0),
    }
    target = TARGET_SERVICE_RATIO.get(model)
    row["target_ratio"] = target
    row["service_met"] = None if target is None or row["service_ratio"] is None else row["service_ratio"] <= target
    # A CLI or service run that lost a path the by-hand run produced did less work: its time is no
    # evidence of speed, so the target is not met, whatever the ratio says.
    row["same_work"] = _same_work(runs)
    if not row["same_work"] and row["service_met"] is not None:
        row["service_met"] = False
    row["repeat_met"] = None if row["repeat_ms"] is None else (row["repeat_ms"] <= TARGET_REPEAT_MS and row["repeat_cached"])
    return row


def _same_work(runs: list[dict]) -> bool:
    for r in runs:
        ref = (r.get("by_hand") or {}).get("sqnr_all") or {}
        for side in ("cli", "service"):
            got = (r.get(side) or {}).get("sqnr_all")
            if got is not None and any(v is not None and got.get(k) is None for k, v in ref.items()):
                return False
    return True


def tables(rows: list[dict], extras: dict) -> str:
    out = []
    out.append("| model | runs | by hand s | CLI s | service warm s | repeat ms | CLI / by hand | service / by hand "
               "| target | met | peak RSS MiB: by hand / CLI / worker |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        met = {True: "yes", False: "**no**", None: "-"}[r["service_met"]]
        if not r.get("same_work", True):
            met = "**no: a path failed in the CLI or service run**"
        out.append(
            f"| {r['model']} | {r['runs']} | {fmt(r['by_hand_s'])} | {fmt(r['cli_s'])} | {fmt(r['service_s'])} "
            f"| {fmt(r['repeat_ms'], '.1f')}{'' if r['repeat_cached'] in (True, None) else ' (not cached!)'} "
            f"| {fmt(r['cli_ratio'], '.2f', '-') + ('x' if r['cli_ratio'] is not None else '')} | {fmt(r['service_ratio'], '.2f', '-') + ('x' if r['service_ratio'] is not None else '')} | {'<= ' + fmt(r['target_ratio'], '.1f') + 'x' if r['target_ratio'] else '-'} "
            f"| {met} | {fmt(r['rss_by_hand_mb'], '.0f')} / {fmt(r['rss_cli_mb'], '.0f')} / {fmt(r['rss_worker_mb'], '.0f')} |")
    out.append("")
    stages = ["prepare", "fp32", "ort_pre_process", "quantize", "inspect", "optimize", "evaluate", "decide"]
    out.append("Per-stage seconds (`report.timings`, median; `quantize` includes `ort_pre_process`): CLI | service warm")
    out.append("")
    out.append("| model | " + " | ".join(stages) + " | sum |")
    out.append("|---|" + "---|" * (len(stages) + 1))
    for r in rows:
        cells = []
        for s in stages:
            cells.append(f"{fmt(r['cli_timings'].get(s))} \\| {fmt(r['service_timings'].get(s))}")
        cs = sum(v for k, v in r["cli_timings"].items() if k != "ort_pre_process" and v)
        ss = sum(v for k, v in r["service_timings"].items() if k != "ort_pre_process" and v)
        out.append(f"| {r['model']} | " + " | ".join(cells) + f" | {fmt(cs)} \\| {fmt(ss) if r['service_timings'] else '-'} |")
    out.append("")
    out.append("By hand, per step (median seconds inside the process; wall also pays interpreter start and exit):")
    out.append("")
    keys = list(rows[0]["by_hand_steps"]) if rows else []
    out.append("| model | " + " | ".join(keys) + " |")
    out.append("|---|" + "---|" * len(keys))
    for r in rows:
        out.append(f"| {r['model']} | " + " | ".join(fmt(r["by_hand_steps"].get(k)) for k in keys) + " |")
    if extras.get("healthz"):
        h = extras["healthz"]
        out.append("")
        out.append(f"/healthz while two {h['model']} comparisons run: {h['requests']} requests, p50 {fmt(h['p50_ms'])} ms, "
                   f"p99 **{fmt(h['p99_ms'])} ms** (target <= {TARGET_HEALTHZ_P99_MS:.0f}: "
                   f"{'met' if healthz_met(h) else 'NOT met'}), "
                   f"max {fmt(h['max_ms'])} ms; jobs succeeded: {h.get('jobs_succeeded', '?')}/{h.get('jobs_submitted', 2)}; "
                   f"/healthz answers: {h.get('healthz_answers', 'not recorded')}")
    if extras.get("upload"):
        u = extras["upload"]
        out.append("")
        out.append(f"Upload of a {u['model_mb']} MiB ONNX model (HTTP {u['status']}, {fmt(u['upload_s'])} s): API process RSS "
                   f"{fmt(u['rss_before_mb'], '.0f')} -> peak {fmt(u['rss_peak_mb'], '.0f')} MiB, growth **{fmt(u['growth_mb'], '.1f')} MiB** "
                   f"(target < {TARGET_UPLOAD_RSS_MB:.0f}: {'met' if upload_met(u) else 'NOT met'})")
    if extras.get("calibration"):
        out.append("")
        out.append("PT2E calibration (`bench/calibration.py`; XNNPACK symmetric per-channel config: HistogramObserver on "
                   "activations, PerChannelMinMaxObserver on weights), seconds:")
        out.append("")
        out.append("| model | samples | fp32 forwards | calibrate | in act. observers | in weight observers | convert "
                   "| calibrate / fp32 | one batch of N | batch / per-sample | max Δscale if batched | Δzero-points |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for c in extras["calibration"]:
            out.append(f"| {c['model']} | {c['samples']} | {fmt(c['fp32 fwd'], '.3f')} | {fmt(c['calibrate'], '.3f')} "
                       f"| {fmt(c['in activation observers'], '.3f')} | {fmt(c['in weight observers'], '.3f')} "
                       f"| {fmt(c['convert'], '.3f')} | {fmt(c['calibrate / fp32 fwd'], '.1f')}x "
                       f"| {fmt(c['batched calibrate'], '.3f')} | {fmt(c['batched / calibrate'], '.2f')}x "
                       f"| {c['batched max rel scale diff']:.3%} | {c['batched zero points changed']} |")
    return "\n".join(out)


# --- machine ---------------------------------------------------------------------------------------

def machine() -> dict:
    flags = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    model_name = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model_name = line.split(":", 1)[1].strip()
                break
    interesting = [f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")) or f in ("sse4_2", "vnni")]
    from importlib.metadata import version

    versions = {}
    for pkg in ("torch", "torchao", "onnx", "onnxscript", "onnxruntime", "onnx2torch", "numpy", "fastapi", "uvicorn"):
        with contextlib.suppress(Exception):
            versions[pkg] = version(pkg)
    return {"cpu": model_name, "arch": platform.machine(), "logical_cores": psutil.cpu_count(),
            "physical_cores": psutil.cpu_count(logical=False), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "isa_flags": interesting, "python": platform.python_version(), "versions": versions,
            "load_avg_at_start": os.getloadavg()}


def record(rows, extras, mach, args, started: str) -> None:
    met = []
    for r in rows:
        if r["service_met"] is not None:
            differ = (f"; not equal work: the service reused {r['levels_reused']} level graph(s) ORT left unchanged "
                      f"(same_graph_as), which by hand runs again" if r.get("levels_reused") else "")
            met.append(f"- warm service <= {r['target_ratio']}x by hand on {r['model']}: "
                       f"{'**met**' if r['service_met'] else '**not met**'} ({fmt(r['service_ratio'])}x{differ})")
    reps = [r for r in rows if r["repeat_met"] is not None]
    if reps:
        ok = all(r["repeat_met"] for r in reps)
        met.append(f"- repeat submission <= {TARGET_REPEAT_MS:.0f} ms: {'**met**' if ok else '**not met**'} "
                   f"({', '.join(r['model'] + ' ' + fmt(r['repeat_ms'], '.1f') + ' ms' for r in reps)})")
    if extras.get("healthz"):
        p99 = extras["healthz"]["p99_ms"]
        met.append(f"- /healthz p99 <= 50 ms with two comparisons running (both succeed, every probe 200): "
                   f"{'**met**' if healthz_met(extras['healthz']) else '**not met**'} ({fmt(p99)} ms)")
    if extras.get("upload"):
        g = extras["upload"]["growth_mb"]
        met.append(f"- 200 MB upload grows the API RSS by < 50 MB (upload accepted): "
                   f"{'**met**' if upload_met(extras['upload']) else '**not met**'} "
                   f"({fmt(g, '.1f')} MiB, HTTP {extras['upload'].get('status')})")
    if extras.get("calibration"):
        met.append("- PT2E calibration cost reported relative to fp32 forwards (table below); see the notes for what "
                   "can be cut without changing the observers' results")
    v = mach["versions"]
    text = f"""# Benchmark results (issue 8)

Generated by `make bench` (`bench/run.py`): bench run started {started}; this page written {datetime.now(timezone.utc).isoformat(timespec='seconds')}.
Each cell is the median of {args.runs} runs measured in this one bench run; by hand, CLI and service runs
are interleaved per run. Compare the **ratios**: absolute times on this shared machine are noisy.

## Machine
- CPU: {mach['cpu']} ({mach['arch']}), {mach['logical_cores']} logical / {mach['physical_cores']} physical cores,
  {mach['memory_gib']} GiB memory; load average at start {', '.join(f'{x:.2f}' for x in mach['load_avg_at_start'])}
  (the cores are shared with other work)
- ISA flags: {' '.join(mach['isa_flags'])}
- Python {mach['python']}; {', '.join(f'{k} {val}' for k, val in v.items())}

## Targets
{chr(10).join(met)}

## Table
{tables(rows, extras)}
"""
    text += "\nRaw figures of this run: `RESULTS.json` beside this page.\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "RESULTS.md").write_text(text)
    (OUT / "RESULTS.json").write_text(json.dumps({"machine": mach, "rows": rows, "extras": extras, "started": started},
                                                 indent=2, default=str))
    log(f"wrote {OUT / 'RESULTS.md'}")


# --- main ------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="quantcompare benchmarks (issue 8)")
    p.add_argument("--models", default=None, help=f"comma-separated, default {','.join(ALL_MODELS)}")
    p.add_argument("--runs", type=int, default=None, help="runs per model (default 3; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="conv_relu and op_zoo_net, 1 run")
    p.add_argument("--smoke", action="store_true", help="conv_relu once, tiny counts, by hand + CLI only")
    p.add_argument("--no-service", action="store_true", help="skip the server (by hand and CLI only)")
    p.add_argument("--no-extras", action="store_true", help="skip /healthz, upload and calibration measurements")
    p.add_argument("--record", dest="record", action="store_true", default=None, help="write var/bench/run/RESULTS.md and .json")
    p.add_argument("--no-record", dest="record", action="store_false")
    p.add_argument("--json", default=None, help="also write the raw results here")
    p.add_argument("--workdir", default=None, help="scratch folder (default: a temp dir, removed after)")
    p.add_argument("--from-json", default=None, help="re-render the tables (and var/bench/run/RESULTS.md) from a --json file")
    args = p.parse_args(argv)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        rows, extras, mach = data["rows"], data["extras"], data["machine"]
        args.runs = max((r["runs"] for r in rows), default=0)
        print(tables(rows, extras))
        if args.record is not False:
            record(rows, extras, mach, args, data["started"])
        return 0
    full = not (args.models or args.quick or args.smoke)
    if args.smoke:
        models, args.runs, args.no_service, args.no_extras = ["conv_relu"], 1, True, True
    elif args.quick:
        models = (args.models or "conv_relu,op_zoo_net").split(",")
        args.runs = args.runs or 1
    else:
        models = (args.models or ",".join(ALL_MODELS)).split(",")
    args.runs = args.runs or 3
    do_record = full if args.record is None else args.record
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    mach = machine()

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="qc-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    server = None
    rows, extras = [], {}
    try:
        if not args.no_service:
            log("starting quantcompare serve on loopback and warming both workers")
            server = Server(work)
            warm = [threading.Thread(target=server.submit, args=("conv_relu", {"seed": s}), daemon=True) for s in (7001, 7002)]
            for th in warm:
                th.start()
            for th in warm:
                th.join()
        for model in models:
            opts = bench_options(model, smoke=args.smoke)
            runs = []
            for i in range(args.runs):
                run = {}
                log(f"{model} run {i + 1}/{args.runs}: by hand")
                run["by_hand"] = by_hand_once(model, opts, work)
                log(f"{model} run {i + 1}/{args.runs}: CLI")
                run["cli"] = cli_once(model, opts, work)
                if server is not None:
                    log(f"{model} run {i + 1}/{args.runs}: service")
                    run["service"] = service_once(server, model, opts, seed=1000 + i)
                runs.append(run)
            rows.append(summarize(model, runs))
            if args.smoke:
                print(runs[0]["by_hand"]["stdout"].rstrip())
                print(runs[0]["cli"]["stdout"].rstrip())
        if server is not None and not args.no_extras:
            load_model = "tiny_transformer" if "tiny_transformer" in models else models[-1]
            log(f"/healthz while two {load_model} comparisons run")
            extras["healthz"] = healthz_under_load(server, load_model, bench_options(load_model))
            log("200 MiB upload")
            extras["upload"] = upload_rss(server, work)
        if not args.no_extras:
            log("PT2E calibration vs fp32 forwards")
            extras["calibration"] = calibration_rows(models, work)
    finally:
        if server is not None:
            server.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"quantcompare bench: {', '.join(models)}; {args.runs} run(s) each; "
          f"{mach['logical_cores']} cores, load {mach['load_avg_at_start'][0]:.2f} at start")
    print(tables(rows, extras))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": mach, "rows": rows, "extras": extras, "started": started},
                                              indent=2, default=str))
    if do_record:
        record(rows, extras, mach, args, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
