"""The script the OpenVINO target runs: each file read by OpenVINO's ONNX frontend, compiled for its CPU
plugin, the layers it executes (runtime model: ``runtimePrecision``, kernel) and its outputs, then a fixed
count of timed runs on one thread. No in-house imports: it runs in a child process with ``openvino`` first
on its path (native_run.py).

    python openvino_run.py REQUEST.json

Request: ``artifacts`` [{name, path, shapes}], ``samples`` (.npz), ``out_dir``, ``latency_runs``,
``answer``. The plugin's own defaults stand (on a CPU with AVX512-BF16 fp32 layers run as bf16): that is
what a deployment gets, and ``inference_precision`` in the answer says which it was.
"""

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


def _one(ov, np, core, art, req, feeds):
    from runner_io import failure, outputs_npz, timed  # on the path the script's start gave

    entry = {}
    t0 = time.perf_counter()
    try:
        model = core.read_model(art["path"])
        if art.get("shapes"):
            model.reshape({k: v for k, v in art["shapes"].items()})
        compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1})
    except Exception as e:  # noqa: BLE001 - OpenVINO refusing the file is the finding
        entry["error"] = failure(e)
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
            entry["outputs_file"], entry["outputs"] = outputs_npz(runs, out / "outputs.npz"), names
            if req.get("latency_runs"):
                entry["latency"] = timed(lambda: request.infer(feeds[0]), int(req["latency_runs"]))
        except Exception as e:  # noqa: BLE001
            entry["error"] = failure(e, "run failed: ")
    return entry


def main(request_path):
    from runner_io import answered, each_artifact, read_request

    import numpy as np
    import openvino as ov

    req = read_request(request_path)
    core = ov.Core()
    answer = {"openvino_version": ov.__version__, "artifacts": {}}
    if "CPU" not in core.available_devices:
        answer["unavailable"] = f"OpenVINO offers no CPU device here (devices: {core.available_devices})"
        return answered(req, answer)
    return each_artifact(req, answer, lambda art, feeds: _one(ov, np, core, art, req, feeds))


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # runner_io.py, beside the emulated script
    sys.exit(main(sys.argv[1]))
