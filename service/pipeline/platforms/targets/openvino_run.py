"""The script the OpenVINO target runs: each file read by OpenVINO's ONNX frontend, compiled for its CPU
plugin, the layers it executes (runtime model: ``runtimePrecision``, kernel) and its outputs, then a fixed
count of timed runs on one thread. No in-house imports: it runs in a child process with ``openvino`` first
on its path (native_run.py).

    python openvino_run.py REQUEST.json

Request: ``artifacts`` [{name, path, shapes}], ``samples`` (.npz), ``out_dir``, ``latency_runs``,
``answer``. The plugin's own defaults stand (on a CPU with AVX512-BF16 fp32 layers run as bf16): that is
what a deployment gets, and ``inference_precision`` in the answer says which it was.
"""

import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

SKIPPED_LAYERS = ("Input", "Output", "Const", "Parameter", "Result")


def _layers(compiled):
    precisions, kernels = Counter(), Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        kind = rt["layerType"].astype(str) if "layerType" in rt else op.get_type_name()
        if kind in SKIPPED_LAYERS:
            continue
        precisions[rt["runtimePrecision"].astype(str) if "runtimePrecision" in rt else "?"] += 1
        kernels[f"{kind}: {rt['primitiveType'].astype(str) if 'primitiveType' in rt else '?'}"] += 1
    return dict(precisions), dict(kernels)


def _latency(request, feed, runs):
    request.infer(feed)  # warm-up: first-run allocations are not the model's latency
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        request.infer(feed)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"median_ms": statistics.median(times), "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))],
            "p10_ms": times[int(0.1 * len(times))], "runs": runs, "warmup": 1}


def _one(ov, np, core, art, req, feeds):
    entry = {}
    t0 = time.perf_counter()
    try:
        model = core.read_model(art["path"])
        if art.get("shapes"):
            model.reshape({k: v for k, v in art["shapes"].items()})
        compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1})
    except Exception as e:  # noqa: BLE001 - OpenVINO refusing the file is the finding
        entry["error"] = f"{type(e).__name__}: {e}"[:3000]
        return entry
    entry["session_seconds"] = round(time.perf_counter() - t0, 4)
    entry["inference_precision"] = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    entry["precision_histogram"], entry["kernels"] = _layers(compiled)
    names = [o.get_any_name() for o in compiled.outputs]
    if feeds:
        try:
            request = compiled.create_infer_request()
            runs = [[np.asarray(v) for v in request.infer(f).values()] for f in feeds]
            out = Path(req["out_dir"]) / art["name"]
            out.mkdir(parents=True, exist_ok=True)
            np.savez(out / "outputs.npz", **{f"{i}/{k}": y for i, run in enumerate(runs) for k, y in enumerate(run)})
            entry["outputs_file"], entry["outputs"] = str(out / "outputs.npz"), names
            if req.get("latency_runs"):
                entry["latency"] = _latency(request, feeds[0], int(req["latency_runs"]))
        except Exception as e:  # noqa: BLE001
            entry["error"] = f"run failed: {type(e).__name__}: {e}"[:3000]
    return entry


def main(request_path):
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # runner_io.py, beside the emulated script
    from runner_io import answered, read_samples

    import numpy as np
    import openvino as ov

    req = json.loads(Path(request_path).read_text())
    core = ov.Core()
    answer = {"openvino_version": ov.__version__, "artifacts": {}}
    if "CPU" not in core.available_devices:
        answer["unavailable"] = f"OpenVINO offers no CPU device here (devices: {core.available_devices})"
        return answered(req, answer)
    feeds = read_samples(req)
    for art in req["artifacts"]:
        answer["artifacts"][art["name"]] = _one(ov, np, core, art, req, feeds)
    return answered(req, answer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
