"""Targets that compile the file themselves (QNN's HTP, OpenVINO's CPU plugin): per artifact, what the target
took and left (with its reasons), whether it compiled at all, and its outputs against fp32 on this machine on
the same samples with the same judges (``level_numerics``). There is no level graph to save: the target's
graph is its own.

QNN runs in its x86 emulation of the HTP: its outputs are the NPU's arithmetic as QNN models it, its times
are not the NPU's, and none is reported. OpenVINO runs natively and is timed (a fixed count of runs on one
thread). A run that silently fell back to ORT's CPU EP is reported as such (``fallback``, status ``failed``),
never as the target's result.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import onnx

from service.errors import PlatformUnavailable
from service.pipeline.inspect.graph_summary import output_steps
from service.pipeline.ort.targets import Platform
from service.pipeline.platforms.emulated_levels import _reference, unavailable_report
from service.pipeline.platforms.runner_io import read_outputs, samples_npz
from service.pipeline.platforms.targets.native_run import target_run
from service.pipeline.platforms.targets.hints import NO_CHIP, openvino_hint, qnn_fallback, qnn_hint
from service.pipeline.runtime.latency import latency_from_times
from service.pipeline.runtime.numerics import concat_runs, level_numerics
from service.pipeline.vocabulary import graph_from_path
from service.schemas.options import ComparisonOptions, measures_accuracy, timed_levels
from service.schemas.platforms import LATENCY_QNN, NodeLeft, PlatformAccuracy, PlatformReport, PlatformRules, \
    TargetArtifact

__all__ = ["OPENVINO_LATENCY_RUNS", "compiled_target_report", "free_dims_from_feed"]

QNN_SCRIPT = Path(__file__).with_name("qnn_ort.py")
OPENVINO_SCRIPT = Path(__file__).with_name("openvino_run.py")
OPENVINO_LATENCY_RUNS = 50
START_ALLOWANCE_S = 300.0


def free_dims_from_feed(path: Path, feed: dict[str, np.ndarray]) -> dict[str, int]:
    """Each symbolic input dim of the file (``dim_param``) -> its size in the job's samples: QNN takes no node
    of a graph whose shapes it cannot get, so the dims are fixed to what the job measures."""
    model = onnx.load(str(path), load_external_data=False)
    out: dict[str, int] = {}
    for inp in model.graph.input:
        if inp.name not in feed or not inp.type.HasField("tensor_type"):
            continue
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_param") and i < np.ndim(feed[inp.name]):
                out[d.dim_param] = int(np.shape(feed[inp.name])[i])
    return out


def _request(platform: Platform, paths: dict[str, Path], feeds: list[dict], work: Path, out_dir: Path,
             timed: bool) -> dict:
    first = feeds[0] if feeds else {}
    arts = [{"name": n, "path": str(Path(p).resolve()), "free_dims": free_dims_from_feed(Path(p), first),
             "shapes": {k: list(np.shape(v)) for k, v in first.items()}} for n, p in paths.items()]
    return {"artifacts": arts, "out_dir": str(work.resolve()), "context_dir": str(Path(out_dir).resolve()),
            "slug": platform.slug, "soc_model": None if platform.soc in NO_CHIP else platform.soc, "latency_runs": OPENVINO_LATENCY_RUNS if timed else 0,
            "samples": str(samples_npz(feeds, work / "samples.npz").resolve()) if feeds else None}


def _qnn_artifact(platform: Platform, entry: dict, stderr: str, free_dims: dict[str, int]) -> TargetArtifact:
    trace = entry.get("trace")
    left = [NodeLeft(node=u.get("node_name", "?"), op_type=u.get("op_type"), reason=u.get("reason", ""))
            for u in (trace or {}).get("unsupported_nodes", [])]
    summary = (trace or {}).get("summary", {})
    common = dict(free_dims=free_dims, seconds=entry.get("session_seconds"), context_binary=entry.get("context_files", []),
                  nodes_taken=summary.get("supported_nodes"), nodes_total=summary.get("total_onnx_nodes"), nodes_left=left,
                  qnn_ops=(trace or {}).get("qnn_ops", {}))
    if entry.get("error"):
        return TargetArtifact(status="failed", error=entry["error"], hint=qnn_hint(entry["error"], platform.soc), **common)
    fallback = qnn_fallback(trace, stderr, free_dims)
    if fallback:
        return TargetArtifact(status="failed", fallback=fallback, error=fallback,
                              hint="nothing here is QNN's result: see fallback", **common)
    return TargetArtifact(status="ok", **common)


def _openvino_artifact(entry: dict, node_count: int) -> TargetArtifact:
    if entry.get("error"):
        return TargetArtifact(status="failed", error=entry["error"], hint=openvino_hint(entry["error"]),
                              nodes_taken=0, nodes_total=node_count)
    lat = entry.get("latency")
    latency = latency_from_times(lat["times_ms"], warmup=lat["warmup"], intra_op_threads=1,
                                 protocol=f"OpenVINO CPU plugin, one thread, one stream: {lat['runs']} runs of the "
                                          "first eval sample after one warm-up, in the target's own process") if lat else None
    return TargetArtifact(status="ok", nodes_taken=node_count, nodes_total=node_count,
                          precision_histogram=entry.get("precision_histogram", {}), kernels=entry.get("kernels", {}),
                          latency=latency, seconds=entry.get("session_seconds"))


def _with_numerics(art: TargetArtifact, entry: dict, path: Path, ref, n: int, data_dependent) -> TargetArtifact:
    if art.status != "ok" or ref is None or not entry.get("outputs_file"):
        return art
    reference, ref_names = ref
    try:
        numerics = level_numerics(reference, ref_names, concat_runs(read_outputs(entry["outputs_file"], n)), entry["outputs"],
                                  steps=output_steps(graph_from_path(path, lazy=True)), previous=None, samples=n,
                                  data_dependent=data_dependent or {})
    except ValueError as e:
        return art.model_copy(update={"error": f"numerics failed: {e}"[:2000]})
    return art.model_copy(update={"numerics": numerics})


def _base(platform: Platform) -> dict:
    return dict(name=platform.name, kind=platform.kind, arch=platform.arch, emulated=platform.emulated,
                cpu=platform.cpu_label, rules=PlatformRules(int8_allowed=platform.int8_allowed, nchwc=platform.nchwc))


def compiled_target_report(platform: Platform, *, artifact_paths: dict[str, Path],
                           eval_feeds: list[dict[str, np.ndarray]], out_dir: Path, options: ComparisonOptions,
                           data_dependent: dict[int, str] | None = None, root: Path | None = None,
                           backend: str = "htp") -> PlatformReport:
    """Every artifact of ``artifact_paths`` (fp32 included) on a QNN or OpenVINO ``platform``. A runtime that
    is missing gives status ``unavailable``; a file the target refuses is that artifact's ``failed``.
    ``backend``: QNN's backend library ("cpu" is not shipped: it shows the silent fallback being caught)."""
    t0 = time.perf_counter()
    work = Path(out_dir) / f"_platform_{platform.slug}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run_accuracy = options.platform_accuracy.enabled and measures_accuracy(options) and bool(eval_feeds)
    feeds = eval_feeds if run_accuracy else eval_feeds[:1]
    names = [n for n in ("fp32", *sorted(set(artifact_paths) - {"fp32"})) if n in artifact_paths]
    paths = {n: Path(artifact_paths[n]) for n in names}
    request = _request(platform, paths, feeds, work, out_dir, timed=run_accuracy and bool(timed_levels(options)))
    try:
        run = target_run(platform, QNN_SCRIPT if platform.kind == "qnn" else OPENVINO_SCRIPT,
                         {**request, "backend": backend}, timeout_s=options.platform_accuracy.budget_seconds
                         + START_ALLOWANCE_S, root=root)
    except PlatformUnavailable as e:
        shutil.rmtree(work, ignore_errors=True)
        return unavailable_report(platform, e).model_copy(update={"kind": platform.kind})
    t_run = time.perf_counter() - t0
    n = len(feeds) if run_accuracy else 0
    ref = _reference(paths["fp32"], options.levels[0], feeds[:n]) if n and "fp32" in paths else None
    artifacts: dict[str, TargetArtifact] = {}
    for art_in in request["artifacts"]:
        name, entry = art_in["name"], run.answer["artifacts"].get(art_in["name"], {})
        if platform.kind == "qnn":
            art = _qnn_artifact(platform, entry, run.stderr, art_in["free_dims"])
        else:
            art = _openvino_artifact(entry, len(onnx.load(str(paths[name]), load_external_data=False).graph.node))
        artifacts[name] = _with_numerics(art, entry, paths[name], ref, n, data_dependent)
    shutil.rmtree(work, ignore_errors=True)
    return PlatformReport(
        **_base(platform), status="ok", target=_target_label(platform, run.answer), onnxruntime=run.answer.get("ort_version"),
        artifacts=artifacts, accuracy=_accuracy(platform, options, n, len(eval_feeds), t_run) if run_accuracy else None,
        latency=LATENCY_QNN if platform.kind == "qnn" else
        f"measured: median of {OPENVINO_LATENCY_RUNS} runs on one thread, per artifact in artifacts.<name>.latency"
        if request["latency_runs"] else "not timed: options.latency is off, or depth structure",
        timings={"target": round(t_run, 3), "read": round(time.perf_counter() - t0 - t_run, 3)})


def _target_label(platform: Platform, answer: dict) -> str:
    if platform.kind == "qnn":
        return (f"onnxruntime-qnn (QNN {answer.get('qnn_sdk_version')}) on onnxruntime {answer.get('ort_version')}, "
                f"HTP backend, soc_model {platform.soc}")
    return f"openvino {answer.get('openvino_version')}, CPU plugin"


def _accuracy(platform: Platform, options: ComparisonOptions, n: int, total: int, seconds: float) -> PlatformAccuracy:
    return PlatformAccuracy(
        samples_run=n, samples_total=total, budget_seconds=options.platform_accuracy.budget_seconds,
        seconds=round(seconds, 3), reference=f"fp32 on this machine at {options.levels[0]}, on the same {n} sample(s)",
        how=f"{platform.name} in its own process on this machine, one thread, every eval sample on every file")
