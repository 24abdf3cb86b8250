"""Job time, peak RSS and disk against model size (issue 16): five sizes built in code + real models.

    python bench/cost_curve.py [--sizes 1,10,30,100,300] [--real ppocr_v4_det,ppocr_v4_det@960] [--big-gb 1.0]
                               [--file model.onnx --options '{"input_shapes": {...}}']
                               [--json var/bench/cost_curve.json] [--options JSON]

Each job runs the way a service worker runs it, in a fresh process per model: import the
toolchain, ``warm_up()`` (the worker preload), then ``run_comparison`` on the model with the
service's settings (level graphs kept as digests, identical files linked), then the job folder is
measured. Per job:

- ``job_s``: wall time of ``run_comparison`` (+ the job-folder dedupe);
- ``fp32_ms``: one fp32 inference of the resolved shapes (1 thread, median of 7, same process,
  after the job) and ``inference_times`` = job_s / fp32 inference;
- ``peak_rss_mb``: the process's peak RSS during the job (``VmHWM``; the warm baseline before
  the job is ``base_rss_mb``: torch + ORT imported and warmed);
- ``disk_mb`` (job folder, hard links once) against ``input_mb`` + ``quantized_mb``.

Built models: a chain of ``MatMul(512x512) + Relu`` blocks, 1 MiB of fp32 weights each, so the
size in MiB is the number of blocks (input [8, 512]). ``--big-gb``: the same chain at 1024 wide,
saved with external data and uploaded as a .zip (the archive path), ``ort_qdq`` only (decimal GB:
the default budget ``max_initializer_bytes`` is 1 GiB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_chain(path: Path, blocks: int, width: int = 512, *, external: bool = False) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(blocks):
        w = (rng.standard_normal((width, width), dtype=np.float32) * np.float32(np.sqrt(2.0 / width)))
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"h{i}"]))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, f"chain{blocks}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [8, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if external:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save(model, str(path))
    return path


def real_model(name: str) -> tuple[Path, dict]:
    sys.path.insert(0, str(ROOT / "tests" / "realworld"))
    from corpus import BY_NAME  # noqa: E402

    name, _, side = name.partition("@")  # ppocr_v4_det@960: the detector at 960x960
    m = BY_NAME[name]
    opts = dict(m.options)
    if name == "ppocr_v4_det":
        n = int(side or 320)
        opts["input_shapes"] = {"x": [1, 3, n, n]}
    return m.locate(Path(tempfile.gettempdir())), opts


def rss_sampler():
    """``bench/run.py``'s ``PeakRss`` on this process, which also keeps where the main thread was at the
    peak (the innermost frames of ours and the toolchains'): what the peak was spent on."""
    import threading

    from bench.run import PeakRss

    main = threading.main_thread().ident

    class WherePeak(PeakRss):
        where = ""

        def _sample(self) -> None:
            before = self.peak_mb
            super()._sample()
            if self.peak_mb > before:
                frame, names = sys._current_frames().get(main), []
                while frame is not None and len(names) < 6:
                    code = frame.f_code
                    if "/service/" in code.co_filename or "site-packages" in code.co_filename:
                        names.append(f"{Path(code.co_filename).stem}.{code.co_name}")
                    frame = frame.f_back
                self.where = " < ".join(names)

    return WherePeak(lambda: [os.getpid()], every=0.25)


def _peak_rss_bytes() -> int:
    """This process's peak RSS: ``VmHWM``, the high-water mark of its own address space.

    Not ``ru_maxrss``: a child started with vfork/posix_spawn (Python's subprocess does) inherits the
    parent's high-water mark at exec, so a job run from a parent that had just built a 1 GB model read
    3.1 GB whatever the job itself did (2.3 GB by VmHWM and by the RSS sampler's own peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _bytes(folder: Path) -> int:
    from service.jobs.storage.disk import folder_bytes

    return folder_bytes(folder)


def one_job(model: str, options_json: str, out_json: str) -> None:
    """In a fresh process: warm up like a worker, run one job like the service, write the numbers."""
    import logging
    import shutil
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger().setLevel(logging.ERROR)
    import numpy as np
    import psutil

    from service.jobs.storage.disk import dedupe_job_files, drop_consumed_archive
    from service.jobs.storage.report_file import write_report
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    from service.jobs.warmup import warm_up

    warm_up()
    proc = psutil.Process()
    base_rss = proc.memory_info().rss
    options = ComparisonOptions(**json.loads(options_json))
    work = Path(tempfile.mkdtemp(prefix="qc-curve-"))
    try:
        job_dir = work / "job"
        (job_dir / "input").mkdir(parents=True)
        src = Path(model)
        dest = job_dir / "input" / ("model.zip" if src.suffix == ".zip" else "model.onnx")
        shutil.copyfile(src, dest)
        input_bytes = dest.stat().st_size
        t0 = time.perf_counter()
        with rss_sampler() as sampler:
            report = run_comparison(ComparisonRequest(options=options, model_path=dest, model_name=src.stem,
                                                      keep_level_graphs=False), job_dir)
        dedupe_job_files(job_dir)
        write_report(job_dir, report.model_dump_json())  # stored as the service stores it (compressed)
        drop_consumed_archive(job_dir, str(dest.relative_to(job_dir)))  # as service/jobs/runner.py does
        job_s = time.perf_counter() - t0
        peak_rss = _peak_rss_bytes()
        arts = job_dir / "artifacts"
        quantized = sum((arts / f"{a}.onnx").stat().st_size for a, art in report.artifacts.items()
                        if a != "fp32" and art.status == "ok" and (arts / f"{a}.onnx").exists())
        # Archives: the data file the fp32 model references counts as input too (it was in the upload).
        disk = _bytes(job_dir)
        from service.pipeline.ort.sessions import session_for

        s = session_for(arts / "fp32.onnx", "all", intra_op_threads=1)
        feed = {}
        for spec in report.model.inputs:
            shape = report.model.resolved_input_shapes[spec.name]
            feed[spec.name] = np.random.default_rng(0).random(shape).astype(spec.dtype or "float32")
        for _ in range(2):
            s.run(None, feed)
        times = []
        for _ in range(7):
            t = time.perf_counter()
            s.run(None, feed)
            times.append(time.perf_counter() - t)
        fp32_s = float(np.median(times))
        # Latency truth: the report's median vs an independent 7-run median (fresh session, 3 untimed runs).
        latency_check = {}
        for artifact in ("fp32", "ort_qdq"):
            ol = report.artifacts.get(artifact) and report.artifacts[artifact].optimized.get("all")
            if not ol or ol.latency is None or not (arts / f"{artifact}.onnx").exists():
                continue
            s2 = session_for(arts / f"{artifact}.onnx", "all", intra_op_threads=1)
            for _ in range(3):
                s2.run(None, feed)
            t7 = []
            for _ in range(7):
                t = time.perf_counter()
                s2.run(None, feed)
                t7.append((time.perf_counter() - t) * 1000)
            oracle = float(np.median(t7))
            latency_check[f"{artifact}.all"] = {
                "report_ms": ol.latency.median_ms, "independent_7run_ms": oracle,
                "ratio": ol.latency.median_ms / oracle, "runs": ol.latency.runs, "noisy": ol.latency.noisy,
                "noisy_reasons": ol.latency.noisy_reasons}
            del s2
        levels = [ol for a in report.artifacts.values() for ol in a.optimized.values()]
        lat = [ol.latency for ol in levels if ol.latency is not None and not ol.latency.timed_with]
        out = {
            "model": src.name, "input_mb": input_bytes / 1e6, "quantized_mb": quantized / 1e6,
            "disk_mb": disk / 1e6, "disk_ratio": disk / (input_bytes + quantized),
            "job_s": job_s, "fp32_ms": fp32_s * 1000, "inference_times": job_s / fp32_s,
            "base_rss_mb": base_rss / 1e6, "peak_rss_mb": peak_rss / 1e6,
            "peak_rss_over_model": peak_rss / input_bytes,
            "stages": report.timings,
            "paths": {a: art.status for a, art in report.artifacts.items()},
            "path_seconds": {a: art.seconds for a, art in report.artifacts.items()},
            "report_cost": report.cost.model_dump() if report.cost else None,
            # Where evaluate's seconds went: each graph's timed runs and median.
            "graphs": {f"{a}.{lv}": {"median_ms": ol.latency.median_ms, "runs": ol.latency.runs,
                                     "session_s": ol.session_seconds}
                       for a, art in report.artifacts.items() for lv, ol in art.optimized.items()
                       if ol.latency is not None and not ol.latency.timed_with},
            "graphs_timed": len(lat), "timed_runs": sum(x.runs for x in lat),
            "noisy_latencies": sum(1 for x in lat if x.noisy),
            "load_avg_1m": os.getloadavg()[0],
            "latency_check": latency_check,
            "sampled_peak_rss_mb": sampler.peak_mb * 1.048576,  # MiB -> MB
            "sampled_peak_where": sampler.where,
        }
        Path(out_json).write_text(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_child(model: Path, options: dict) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, __file__, "--one", str(model), "--options", json.dumps(options), "--out", out]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True)
    if proc.returncode != 0:
        return {"model": model.name, "error": proc.stderr[-1500:], "wall_s": time.perf_counter() - t}
    data = json.loads(Path(out).read_text())
    os.unlink(out)
    return data


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1,10,30,100,300")
    p.add_argument("--real", default="ppocr_v4_det")
    p.add_argument("--file", action="append", default=[],
                   help="a real .onnx outside the corpus (repeatable), run with --options, e.g. a model from a wheel")
    p.add_argument("--big-gb", type=float, default=0.0)
    p.add_argument("--options", default="{}")
    p.add_argument("--json", default=str(ROOT / "var" / "bench" / "cost_curve.json"))
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        one_job(args.one, args.options, args.out)
        return 0
    base_opts = json.loads(args.options)
    rows = []
    with tempfile.TemporaryDirectory(prefix="qc-curve-models-") as d:
        for mb in [int(x) for x in args.sizes.split(",") if x]:
            path = build_chain(Path(d) / f"chain_{mb}mb.onnx", mb)
            row = run_child(path, base_opts)
            row["size"] = f"{mb} MiB (built)"
            rows.append(row)
            print(json.dumps(row), flush=True)
            path.unlink()
        for name in [n for n in args.real.split(",") if n]:
            path, opts = real_model(name)
            row = run_child(path, {**opts, **base_opts})
            row["size"] = f"{name} (real)"
            rows.append(row)
            print(json.dumps(row), flush=True)
        for file in args.file:
            row = run_child(Path(file), base_opts)
            row["size"] = f"{Path(file).name} (real)"
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.big_gb:
            # Decimal GB: the default security budget (max_initializer_bytes) is 1 GiB, which a 1.0 GB
            # model fits and a 1.0 GiB one does not (the operator raises QUANTCOMPARE_BUDGET_* for more).
            blocks = -(-int(args.big_gb * 1e9) // (1024 * 1024 * 4))
            folder = Path(d) / "big"
            folder.mkdir()
            onnx_path = build_chain(folder / "big.onnx", blocks, width=1024, external=True)
            archive = Path(d) / "big.zip"
            with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
                z.write(onnx_path, onnx_path.name)
                z.write(folder / (onnx_path.name + ".data"), onnx_path.name + ".data")
            for f in folder.iterdir():
                f.unlink()
            row = run_child(archive, {"artifacts": ["ort_qdq"], **base_opts})
            row["size"] = f"{blocks * 4 * 1024 * 1024 / 1e9:.2f} GB external data, .zip archive (built)"
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"rows": rows, "cpu_count": os.cpu_count(),
                                           "load_avg_end": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
