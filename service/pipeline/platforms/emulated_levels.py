"""The levels stage on an emulated platform: every artifact at every level, as the platform's ORT
saves and runs it, read by the same functions as this machine's graphs (``level_structure``,
``diff_graphs``, ``level_numerics``) under the platform's own rules (``Platform.int8_allowed``).

One emulated process per platform and job (qemu-user's start-up and ORT's import cost seconds under
emulation): it writes each level graph, then runs the eval samples on every distinct graph of the
quantized artifacts within ``options.platform_accuracy.budget_seconds``. fp32 is not run there (soft
float under qemu is ~250x slower than native): every SQNR is against fp32 on this machine, at the
first level run, on the same samples. Latency is never measured under emulation.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from service.errors import PlatformUnavailable
from service.pipeline.inspect.graph_diff import diff_graphs
from service.pipeline.inspect.graph_summary import output_steps
from service.pipeline.isolation import scrub
from service.pipeline.ort.sessions import session_for
from service.pipeline.platforms.targets.native_run import target_run
from service.pipeline.platforms.runner_io import read_outputs, samples_npz
from service.pipeline.platforms.runtime import EMULATED_SCRIPT, emulated_run
from service.pipeline.ort.targets import Platform
from service.pipeline.runtime.level_graphs import fingerprint, self_contained_bytes, self_contained_from_level_graph
from service.pipeline.runtime.latency import latency_from_times
from service.pipeline.runtime.levels import LevelsInput, LevelsResult, level_structure
from service.pipeline.runtime.numerics import RunOutputs, concat_runs, level_numerics
from service.pipeline.vocabulary import float_tail_nodes, graph_from_path, int8_coverage
from service.schemas.levels import LatencyStats, OptimizedLevel
from service.schemas.options import LEVEL_VALUES, measures_accuracy, timed_levels
from service.schemas.platforms import PlatformAccuracy, PlatformError, PlatformReport, PlatformRules

__all__ = ["artifact_names", "platform_levels", "unavailable_report"]

# Session creation is 0.01-0.2 s per level under emulation for models up to ~11 MB, ORT's import ~10 s:
# the process may run this long past the accuracy budget before it counts as hung.
START_AND_GRAPHS_ALLOWANCE_S = 600.0


# An ORT release (ort:<version>) runs natively: its level graphs are timed with a fixed count of runs.
RELEASE_LATENCY_RUNS = 50


def _levels_answer(platform: Platform, request: dict, timeout_s: float, root: Path | None) -> dict:
    """The script's answer from the emulated interpreter, or (``ort:<version>``) from this interpreter with that
    release first on its path; a release that is not the one asked for is refused, never reported as it."""
    if platform.kind != "ort":
        return emulated_run(platform, request, timeout_s=timeout_s, root=root)
    answer = target_run(platform, EMULATED_SCRIPT, request, timeout_s=timeout_s).answer
    if answer.get("ort_version") != platform.version:
        raise PlatformUnavailable(f"{platform.name}: the process imported onnxruntime {answer.get('ort_version')}",
                                  hint="its folder under .venv/targets is broken: run `make` again", platform=platform.name)
    return answer


def _latency_stats(entry: dict) -> LatencyStats | None:
    lat = entry.get("latency")
    if not lat:
        return None
    return latency_from_times(lat["times_ms"], warmup=lat["warmup"], intra_op_threads=1, timed_with=lat.get("timed_with"),
                              protocol=f"{lat['runs']} runs of the first eval sample after one warm-up, one thread, in the "
                                       "release's own process")


def _how(platform: Platform, version: str | None, budget: float) -> str:
    where = f"onnxruntime {version} in its own process on this machine" if platform.kind == "ort" else \
        f"emulated ORT {version} under qemu-user ({platform.qemu_cpu})"
    return (f"{where}, one thread: one sample timed on every distinct level graph of the quantized artifacts, then as "
            f"many of the first eval samples as the {budget:.0f} s budget holds, the same on every graph")


def _report_base(platform: Platform) -> dict:
    return dict(name=platform.name, kind=platform.kind if platform.kind != "host" else "emulated", arch=platform.arch, emulated=platform.emulated, cpu=platform.cpu_label,
                qemu_cpu=platform.qemu_cpu,
                rules=PlatformRules(int8_allowed=platform.int8_allowed, nchwc=platform.nchwc))


def unavailable_report(platform: Platform, error: PlatformUnavailable) -> PlatformReport:
    return PlatformReport(**_report_base(platform), status="unavailable",
                          error=PlatformError(code=error.code, message=error.message, hint=error.hint))


def _reference(fp32_path: Path, level: str, feeds: list[dict[str, np.ndarray]]) -> RunOutputs:
    """fp32 on this machine at ``level`` on ``feeds``: what the report's SQNRs are against."""
    session = session_for(fp32_path, level)
    names = [o.name for o in session.get_outputs()]
    return RunOutputs(names=names, values=concat_runs([session.run(None, f) for f in feeds]))


def _levels_request(platform: Platform, inputs: LevelsInput, levels: list[str], work: Path,
                    run_accuracy: bool) -> dict:
    """What the platform's process is asked (``emulated_ort.py``): every file's level graphs, and its runs on the
    samples when accuracy is measured; fp32 runs only in an ORT release, which runs natively."""
    names = artifact_names(inputs.artifact_paths)
    return {
        "artifacts": [{"name": n, "path": str(Path(inputs.artifact_paths[n]).resolve()),
                       "run": run_accuracy and (n != "fp32" or platform.kind == "ort")} for n in names],
        "levels": [[lv, LEVEL_VALUES[lv]] for lv in levels], "out_dir": str(work.resolve()),
        "samples": str(samples_npz(inputs.eval_feeds, work / "samples.npz").resolve()) if run_accuracy else None,
        "budget_seconds": inputs.options.platform_accuracy.budget_seconds, "threads": 1,
        "latency_runs": RELEASE_LATENCY_RUNS,
        "latency_levels": timed_levels(inputs.options) if platform.kind == "ort" and run_accuracy else [],
        # An ORT release on this machine runs with the job's options.ort_session, as this machine's sessions do,
        # so what differs is the release's; arm64 runs with its own defaults (QDQIsInt8Allowed() true there).
        "session_config": dict(inputs.options.ort_session) if platform.kind == "ort" else {},
    }


def artifact_names(artifact_paths: dict[str, Path]) -> list[str]:
    """fp32 first, then the others by name: the order a platform's report lists them in."""
    return [n for n in ("fp32", *sorted(set(artifact_paths) - {"fp32"})) if n in artifact_paths]


def _platform_accuracy(platform: Platform, answer: dict, samples_run: int, inputs: LevelsInput,
                       level: str) -> PlatformAccuracy:
    """How many samples ran within the budget, and against what (fp32 on this machine at ``level``)."""
    total, budget = len(inputs.eval_feeds), inputs.options.platform_accuracy.budget_seconds
    return PlatformAccuracy(
        samples_run=samples_run, samples_total=total, budget_seconds=budget,
        seconds=float(answer.get("run_seconds") or 0.0),
        reference=f"fp32 on this machine at {level}, on the same {samples_run} sample(s)",
        how=_how(platform, answer.get("ort_version"), budget)
        + ("" if samples_run == total else f" ({samples_run} of {total})"))


def platform_levels(platform: Platform, inputs: LevelsInput, host: LevelsResult, out_dir: Path, *,
                    root: Path | None = None) -> PlatformReport:
    """Every artifact of ``inputs.artifact_paths`` at the levels this machine's levels stage ran
    (``host.levels``) on ``platform`` (emulated), its blockers read with the file facts that stage took
    (``host.files``). A runtime that is missing or fails gives a report with status ``unavailable`` and the
    stable code, never an exception. Its level graphs are always stored: a download cannot make an emulated
    graph again (runtime/level_graphs.py regenerates with this machine's ORT). Accuracy runs only at a depth
    that measures it."""
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    work = out_dir / f"_platform_{platform.name.replace(':', '_')}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    artifact_paths, eval_feeds, levels = inputs.artifact_paths, inputs.eval_feeds, host.levels
    acc = inputs.options.platform_accuracy
    run_accuracy = acc.enabled and measures_accuracy(inputs.options) and bool(eval_feeds)
    try:
        answer = _levels_answer(platform, _levels_request(platform, inputs, levels, work, run_accuracy),
                                acc.budget_seconds + START_AND_GRAPHS_ALLOWANCE_S, root)
    except PlatformUnavailable as e:
        shutil.rmtree(work, ignore_errors=True)
        return unavailable_report(platform, e)
    t_emulated = time.perf_counter() - t0

    t1 = time.perf_counter()
    n = int(answer.get("samples_run") or 0)
    slug = platform.name.replace(":", "_")
    reference = None
    if n and "fp32" in artifact_paths:
        reference = _reference(Path(artifact_paths["fp32"]), levels[0], eval_feeds[:n])
    fp32_compute = int8_coverage(graph_from_path(Path(artifact_paths["fp32"]), lazy=True)).float_count \
        if "fp32" in artifact_paths else 0
    optimized: dict[str, dict[str, OptimizedLevel]] = {}
    for name in artifact_names(artifact_paths):
        file_graph = graph_from_path(Path(artifact_paths[name]), lazy=True)
        steps = output_steps(file_graph)
        float_tail = float_tail_nodes(file_graph) if name == "pt2e_qdq" else {}
        done = answer["artifacts"].get(name, {})
        per_level: dict[str, OptimizedLevel] = {}
        prev_graph, prev_level, prev_outputs, extended_rows = file_graph, "file", None, None
        outputs_at: dict[str, list[np.ndarray]] = {}
        for level in levels:
            entry = done.get(level, {})
            if "folder" not in entry:
                per_level[level] = OptimizedLevel(level=level, level_value=LEVEL_VALUES[level],
                                                  error=scrub(entry.get("error", "not run"))[:2000])
                continue
            lg = fingerprint(Path(entry["folder"]))
            graph = graph_from_path(lg.graph, lazy=True)
            structure = level_structure(graph, name=name, level=level, facts=host.files[name],
                                        fp32_compute=fp32_compute, int8_allowed=platform.int8_allowed,
                                        extended_rows=extended_rows, float_tail=float_tail)
            rows = structure.pop("extended_rows")
            extended_rows = rows if level == "extended" else extended_rows
            same_as = entry.get("same_graph_as")
            numerics = None
            error = entry.get("error")
            outputs = outputs_at.get(same_as) if same_as else (
                concat_runs(read_outputs(entry["outputs_file"], n)) if entry.get("outputs_file") else None)
            if outputs is not None and reference is not None:
                outputs_at[level] = outputs
                try:
                    numerics = level_numerics(reference, RunOutputs(names=entry["outputs"], values=outputs),
                                              steps=steps, previous=prev_outputs, samples=n,
                                              data_dependent=inputs.data_dependent)
                except ValueError as e:
                    error = scrub(f"numerics failed: {e}")[:2000]
                prev_outputs = outputs
            out_file = out_dir / f"{name}.{level}.{slug}.onnx"
            self_contained_from_level_graph(lg, out_file)
            per_level[level] = OptimizedLevel(
                level=level, level_value=LEVEL_VALUES[level], file=out_file.name, error=error, **structure,
                diff=diff_graphs(prev_graph, graph, previous=prev_level), numerics=numerics, latency=_latency_stats(entry),
                session_seconds=entry.get("session_seconds"), same_graph_as=same_as,
                graph_sha256=lg.graph_sha256, weights_sha256=lg.data_sha256, graph_bytes=lg.graph_bytes,
                weights_bytes=lg.data_bytes, download_bytes=self_contained_bytes(graph.model, lg.folder),
                file_stored=True)
            prev_graph, prev_level = graph, level
        optimized[name] = per_level
    shutil.rmtree(work, ignore_errors=True)
    return PlatformReport(**_report_base(platform), status="ok", onnxruntime=answer.get("ort_version"),
                          optimized=optimized,
                          accuracy=_platform_accuracy(platform, answer, n, inputs, levels[0]) if run_accuracy else None,
                          timings={"emulated": round(t_emulated, 3), "read": round(time.perf_counter() - t1, 3)})
