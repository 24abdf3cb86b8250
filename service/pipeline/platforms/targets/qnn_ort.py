"""The script a QNN target runs: each file on ONNX Runtime with the QNN EP (HTP backend, emulated on this
CPU), its op trace, its EP-context binary and its outputs. No in-house imports: it runs in a child process
with ``onnxruntime-qnn`` first on its path (native_run.py), because QNN's libraries print to stdout.

    python qnn_ort.py REQUEST.json

Request: ``artifacts`` [{name, path, free_dims}], ``soc_model`` (None: no chip named), ``backend`` ("htp";
"cpu" only to show a backend that does not load), ``out_dir``, ``context_dir``, ``samples`` (.npz),
``answer``. Per artifact the answer holds ``error`` (session creation refused), the op trace's ``summary``
and ``unsupported_nodes`` (absent: QNN wrote none, its backend did not run), the QNN ops it built, the
context files written, and ``outputs_file``.

Why each setting (measured with onnxruntime-qnn 2.7.0, ORT 1.32):
- ``add_free_dimension_override_by_name``: with a dynamic dim QNN silently takes no node ("Cannot get shape");
- ``backend_path``: the plugin's only device here (the host CPU) has no default backend;
- ``enable_framework_op_trace``: the partition, with QNN's reason for each node it did not take;
- ``ep.context_enable``: the deployable context binary; the same session still runs the samples.
"""

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path


def _options(qnn, soc, backend, trace_dir):
    opts = {"backend_path": qnn.get_qnn_htp_path() if backend == "htp" else qnn.get_qnn_cpu_path(),
            "enable_framework_op_trace": "1", "framework_op_trace_dir": str(trace_dir)}
    if soc:
        opts["soc_model"] = str(soc)
    return opts


def _trace(trace_dir):
    path = Path(trace_dir) / "qnn_op_trace.json"
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    ops = Counter(m.get("dst_qnn_op_type") for g in d.get("subgraph_traces") or [] for m in g.get("op_mappings") or [])
    return {"summary": d.get("summary") or {}, "unsupported_nodes": d.get("unsupported_nodes") or [],
            "qnn_ops": dict(ops)}


# ORT's constant-folding cap, as every session of the service has it (ort/sessions.py; this script runs in the
# target's process and cannot import service: a test checks the two agree).
CONSTANT_FOLDING_MAX_BYTES = 64 * 1024 * 1024


def _one(ort, qnn, art, req, feeds, device):
    from runner_io import failure, outputs_npz  # on the path the script's start gave

    out = Path(req["out_dir"]) / art["name"]
    trace_dir = out / "trace"
    trace_dir.mkdir(parents=True, exist_ok=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("optimization.constant_folding_max_output_size_in_bytes",
                                str(CONSTANT_FOLDING_MAX_BYTES))
    for dim, value in (art.get("free_dims") or {}).items():
        so.add_free_dimension_override_by_name(dim, int(value))
    ctx = Path(req["context_dir"]) / f"{art['name']}.{req['slug']}_ctx.onnx"
    for stale in (ctx, ctx.with_name(ctx.stem + "_qnn.bin")):
        stale.unlink(missing_ok=True)  # QNN refuses to write over an earlier context model
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(ctx))
    so.add_session_config_entry("ep.context_embed_mode", "0")
    so.add_provider_for_devices(device, _options(qnn, req.get("soc_model"), req.get("backend", "htp"), trace_dir))
    entry = {}
    t0 = time.perf_counter()
    try:
        session = ort.InferenceSession(art["path"], so)
    except Exception as e:  # noqa: BLE001 - QNN refusing the file is the finding
        entry["error"] = failure(e)
        session = None
    entry["session_seconds"] = round(time.perf_counter() - t0, 4)
    entry["trace"] = _trace(trace_dir)
    entry["context_files"] = sorted(p.name for p in Path(req["context_dir"]).glob(ctx.stem + "*") if p.is_file())
    if session is not None and feeds:
        try:
            runs = [session.run(None, f) for f in feeds]
            entry["outputs_file"] = outputs_npz(runs, out / "outputs.npz")
            entry["outputs"] = [o.name for o in session.get_outputs()]
        except Exception as e:  # noqa: BLE001
            entry["error"] = failure(e, "run failed: ")
    return entry


def main(request_path):
    from runner_io import answered, each_artifact, read_request

    import onnxruntime as ort
    import onnxruntime_qnn as qnn

    req = read_request(request_path)
    answer = {"ort_version": ort.__version__, "qnn_ep_version": getattr(qnn, "__version__", None), "artifacts": {}}
    try:
        from onnxruntime_qnn import build_and_package_info as info
        answer["qnn_sdk_version"] = getattr(info, "qnn_version", None)
    except ImportError:
        pass
    if req.get("backend", "htp") == "htp" and not os.path.exists(qnn.get_qnn_htp_path()):
        answer["unavailable"] = f"QNN's HTP backend library is missing ({qnn.get_qnn_htp_path()})"
        return answered(req, answer)
    ort.register_execution_provider_library("QNNExecutionProvider", qnn.get_library_path())
    device = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"][:1]
    if not device:
        answer["unavailable"] = "the QNN EP registered but offers no device on this machine"
        return answered(req, answer)
    return each_artifact(req, answer, lambda art, feeds: _one(ort, qnn, art, req, feeds, device))


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # runner_io.py, beside the emulated script
    sys.exit(main(sys.argv[1]))
