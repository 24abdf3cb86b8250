"""The script the emulated interpreter runs: ORT's level graphs and outputs on the emulated CPU.

It runs under ``qemu-aarch64-static -L SYSROOT SYSROOT/usr/bin/python3.11`` with only the
sysroot's onnxruntime and numpy: no ``service`` import (that would pull pydantic and torch into a
soft-float interpreter), so it is one file with no in-house imports, shipped in the package and
passed to the interpreter by path.

    python3.11 emulated_ort.py REQUEST.json

The request names the models, the levels, the folder for the graphs, the eval samples (.npz) and
a time budget; the answer goes to ``REQUEST.json``'s ``answer`` path. ORT writes each level's graph
while the session is created (``optimized_model_filepath``), with the session settings the host
uses (``ort/sessions.session_options_for``: keep the two in step). Outputs are run on the
first samples only when the budget cannot hold them all: one sample on every distinct graph is timed
first, then the count every graph can afford is run on each, so all levels share the same samples.
"""

import hashlib
import sys
import time
from pathlib import Path

GRAPH_FILE = "model.onnx"
DATA_FILE = "model.data"
CONSTANT_FOLDING_MAX_BYTES = 64 * 1024 * 1024
EXTERNAL_MIN_BYTES = 1024


def _session(ort, model: str, level_value: int, folder: Path, threads: int, config: dict):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel(level_value)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 4
    so.add_session_config_entry("optimization.constant_folding_max_output_size_in_bytes",
                                str(CONSTANT_FOLDING_MAX_BYTES))
    so.optimized_model_filepath = str(folder / GRAPH_FILE)
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA_FILE)
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                str(EXTERNAL_MIN_BYTES))
    for k, v in config.items():
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in (GRAPH_FILE, DATA_FILE):
        p = folder / name
        h.update(p.read_bytes() if p.exists() else b"-")
    return h.hexdigest()


def _missing_level(ort, value: int) -> str | None:
    """ORT before 1.23 has no ORT_ENABLE_LAYOUT, and takes GraphOptimizationLevel(3) without a word (1.18 gave
    the extended graph): that graph must not be called "layout"."""
    if value == 3 and not hasattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT"):
        return f"onnxruntime {ort.__version__} has no layout level (GraphOptimizationLevel.ORT_ENABLE_LAYOUT came in 1.23)"
    return None


def main(request_path: str) -> int:
    import onnxruntime as ort
    # Beside this file: a script's folder is on its path.
    from runner_io import answered, failure, outputs_npz, read_request, read_samples, timed

    req = read_request(request_path)
    ort.set_seed(int(req.get("seed", 0)))
    threads = int(req.get("threads", 1))
    feeds = read_samples(req)
    answer: dict = {"ort_version": ort.__version__, "artifacts": {}}
    out = Path(req["out_dir"])
    runnable = []  # (artifact, level, session): one per distinct graph of an artifact that runs samples
    for art in req["artifacts"]:
        levels_done: dict = {}
        seen: dict[str, str] = {}
        answer["artifacts"][art["name"]] = levels_done
        for level, value in req["levels"]:
            folder = out / art["name"] / level
            folder.mkdir(parents=True, exist_ok=True)
            missing = _missing_level(ort, value)
            if missing:
                levels_done[level] = {"error": missing, "missing_level": True}
                continue
            t0 = time.perf_counter()
            try:
                session = _session(ort, art["path"], value, folder, threads, req.get("session_config", {}))
            except Exception as e:  # noqa: BLE001 - ORT refusing a level is that level's result
                levels_done[level] = {"error": failure(e, "session creation failed: ")}
                continue
            entry = {"session_seconds": round(time.perf_counter() - t0, 4), "folder": str(folder),
                     "outputs": [o.name for o in session.get_outputs()]}
            digest = _digest(folder)
            if digest in seen:
                entry["same_graph_as"] = seen[digest]
            else:
                seen[digest] = level
                if art.get("run") and feeds:
                    runnable.append((art["name"], level, session))
            levels_done[level] = entry
    # One sample on every distinct graph, timed; then as many as the budget holds, the same on each.
    budget = float(req.get("budget_seconds", 120))
    t_start = time.perf_counter()
    results: dict = {}
    first_cost = 0.0
    for name, level, session in runnable:
        t0 = time.perf_counter()
        try:
            results[(name, level)] = [session.run(None, feeds[0])]
        except Exception as e:  # noqa: BLE001 - a kernel failing at run time is a finding
            answer["artifacts"][name][level]["error"] = failure(e, "run failed: ")
        first_cost += time.perf_counter() - t0
    n = 1
    if feeds and first_cost > 0:
        n = max(1, min(len(feeds), int((budget - (time.perf_counter() - t_start)) // first_cost) + 1))
    elif feeds:
        n = len(feeds)
    for name, level, session in runnable:
        if (name, level) not in results:
            continue
        try:
            for feed in feeds[1:n]:
                results[(name, level)].append(session.run(None, feed))
        except Exception as e:  # noqa: BLE001
            answer["artifacts"][name][level]["error"] = failure(e, "run failed: ")
            del results[(name, level)]
    sessions = {(name, level): session for name, level, session in runnable if (name, level) in results}
    for name, levels_done in answer["artifacts"].items():
        for level in req.get("latency_levels") or []:
            entry = levels_done.get(level, {})
            src = entry.get("same_graph_as", level)
            if (name, src) in sessions and not entry.get("error"):
                session, feed = sessions[(name, src)], feeds[0]
                entry["latency"] = timed(lambda: session.run(None, feed), int(req.get("latency_runs", 50)))
                if src != level:
                    entry["latency"]["timed_with"] = src
    answer["samples_run"] = n if runnable else 0
    answer["samples_total"] = len(feeds)
    answer["run_seconds"] = round(time.perf_counter() - t_start, 4)
    for (name, level), runs in results.items():
        answer["artifacts"][name][level]["outputs_file"] = outputs_npz(runs, out / name / level / "outputs.npz")
    return answered(req, answer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
