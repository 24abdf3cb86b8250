"""One comparison, start to finish: the framework-free core the CLI and the workers call.

    prepare   load + check the model, resolve input shapes, make the shared samples
    fp32      the fp32 ONNX reference (uploaded, or exported from torch)
    quantize  pt2e_qdq | ort_qdq | ort_qoperator, each failing alone
    inspect   what each file writes
    optimize  each artifact x each ORT level: the graph ORT runs, diffed level to level
    evaluate  numerics vs fp32, latency
    advice    the changes the blockers point to, re-run and measured
    decide    decisions, lints, platform notes, gate verdict

``run_comparison`` calls one function per stage; each returns a typed value the next ones read.
Each file is parsed once (``files.OnnxFile``) and the report is built once, at the end.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import onnx

from service.errors import InvalidOptions, error_from_os
from service.pipeline.environment import cores_idle, environment
from service.pipeline.files import OnnxFile
from service.pipeline.inputs import sources
from service.pipeline.inputs.data_shapes import array_shapes_in_npz
from service.pipeline.inputs.fp32 import fp32_onnx_from_source
from service.pipeline.inputs.model_ranges import input_ranges_from_onnx
from service.pipeline.inputs.output_shapes import AfterSelection, output_positions, tensors_after_selection
from service.pipeline.inputs.safety import check_input_elements, check_sample_bytes, sniff_model_format
from service.pipeline.inputs.safety.activations import check_activation_bytes, inferred_at_job_shapes
from service.pipeline.inputs.samples import Samples, generated_samples, samples_from_npz
from service.pipeline.inputs.sources import ModelSource
from service.pipeline.inputs.specs import output_specs_from_onnx, resolved_input_shapes
from service.pipeline.inspect.domains import unused_domains_note
from service.pipeline.inspect.inventory import file_info_from_onnx, inventory_from_onnx
from service.pipeline.inputs.stored_nonfinite import nonfinite_weights, selected_by_where
from service.schemas.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.quantize.already_quantized import quantization_in_model, skip_if_quantized
from service.pipeline.quantize.float32_copy import float32_copy_for_ort
from service.pipeline.isolation import PATH_TIME_LIMIT, PathOutcome, run_path
from service.pipeline.quantize.onnx_cleanup import opset_for_ort
from service.pipeline.quantize.ort_fixups import fixed_for_ort_quantizer
from service.pipeline.quantize.ort_quant import preprocessed_for_ort, quantized_by_ort
from service.pipeline.quantize.pt2e import qdq_from_pt2e
from service.pipeline.quantize.side_by_side import LockedProgress, side_by_side, torch_on_one_core
from service.pipeline.runtime.fp32_runs import refuse_if_fp32_cannot_run
from service.pipeline.layers.layers_stage import layers_for_comparison
from service.pipeline.runtime.levels import analyze_levels
from service.pipeline.runtime.output_kinds import artifact_accuracy
from service.pipeline.ort.sessions import quiet_ort_logs, seed_random_ops
from service.pipeline.verdict.advice import advice_plan_for_job, timed_advice
from service.pipeline.verdict.decide import decided_from_levels
from service.pipeline.verdict.gates import verdict_from_artifacts
from service.pipeline.verdict.job_cost import job_cost
from service.pipeline.verdict.lints import (
    fed_back_selection_lints,
    folded_input_lints,
    integer_weight_lints,
    no_artifact_lints,
    overridable_initializer_lints,
    padded_selection_lints,
    qoperator_dropped_relu_lints,
    random_op_lints,
    repeated_weight_lints,
    selection_input_lints,
)
from service.pipeline.verdict.made_up_data import made_up_data_lints
from service.pipeline.vocabulary import GraphIndex, all_nodes, op_key
from service.schemas.levels import Lint
from service.schemas.layers import LayersReport
from service.schemas.report import (Artifact, FileInfo, ModelInfo, PathError, QuantizationInventory, Report, TensorSpec,
                                   ToolInfo)

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
STAGES = ("prepare", "fp32", "quantize", "inspect", "optimize", "evaluate", "advice", "decide")


@dataclass(frozen=True)
class ComparisonRequest:
    options: ComparisonOptions = field(default_factory=ComparisonOptions)
    model_path: Path | None = None
    example: str | None = None
    calibration_path: Path | None = None
    model_name: str | None = None
    # Passed through from the service's settings to the safety checks.
    budgets: object | None = None
    allow_pt2: bool = True
    # The service keeps only the level graphs' digests (a download makes them again); the CLI keeps files.
    keep_level_graphs: bool = True
    # Jobs the service is running right now (recorded with each latency measurement).
    concurrent_jobs: Callable[[], int | None] | None = None
    # Work that times nothing on two threads (the PT2E and ORT paths; the per-tensor table and advice's
    # first phase): None = when two cores are idle (quantize/side_by_side.py).
    parallel_paths: bool | None = None
    # The CLI reads a model where it lies, external data beside it included; a service upload of one
    # .onnx has no folder (its external data comes in an archive).
    data_beside_model: bool = False
    # The PT2E path's time limit when options.pt2e.time_limit_s leaves it open: the service's share
    # of its job time limit (jobs/submission.py), so that the ORT paths' results outlive a slow PT2E.
    pt2e_time_limit_s: float | None = None


def _source(request: ComparisonRequest, workdir: Path):
    if (request.example is None) == (request.model_path is None):
        raise InvalidOptions("give either a model file or an example name, not both or neither",
                             hint="upload a model, or send {\"example\": \"conv_relu\"}")
    if request.example is not None:
        return sources.source_from_example(request.example)

    name = request.model_name or "model"
    if sources.is_model_archive(request.model_path):
        return sources.source_from_archive(request.model_path, workdir / "model", name=name, budgets=request.budgets)
    # Sniffing refuses a .pt2 before any of its bytes are interpreted when .pt2 uploads are off.
    fmt = sniff_model_format(request.model_path, allow_pt2=request.allow_pt2)
    if fmt == "pt2":
        return sources.source_from_pt2(request.model_path, name=name, budgets=request.budgets,
                                       allow_pt2=request.allow_pt2)
    if request.data_beside_model:
        return sources.source_from_onnx_with_local_data(request.model_path, name=name, budgets=request.budgets)
    return sources.source_from_onnx(request.model_path, name=name, budgets=request.budgets)


@dataclass
class _Run:
    """One comparison's folders, timings and progress: what every stage shares."""

    art_dir: Path
    scratch: Path
    notify: Progress
    timings: dict[str, float] = field(default_factory=dict)
    ort_input: Path | None = None  # the file the ORT paths quantized (_input_for_ort); advice and layers re-use it
    already_quantized: bool = False  # the upload was quantized already: inspected as is, quantized by no path

    @contextmanager
    def stage(self, name: str, total: int = 1):
        self.notify(name, 0, total)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - t0, 4)


@dataclass(frozen=True)
class Prepared:
    source: ModelSource
    shapes: dict[str, tuple[int, ...]]
    shape_notes: list[str]
    samples: Samples


@dataclass(frozen=True)
class Fp32:
    file: OnnxFile  # the model as read for its metadata (external data not loaded)
    histogram: dict[str, int]  # op_key -> count, subgraphs included
    # The tensors after a selection (NonMaxSuppression, ...): those whose shape moves are compared by
    # shape only, in the levels and in the per-tensor table.
    after_selection: AfterSelection = field(default_factory=AfterSelection)

    def data_dependent_outputs(self) -> dict[int, str]:
        """Graph output position -> why, for the outputs whose shape depends on the values."""
        return output_positions(self.file.model, self.after_selection.moving)

    def padded_selection(self) -> dict[str, str]:
        """Graph outputs after a selection whose shape is fixed (rows padded to a maximum) -> why."""
        return {o.name: self.after_selection.fixed[o.name] for o in self.file.model.graph.output
                if o.name in self.after_selection.fixed}


@dataclass(frozen=True)
class Inspected:
    artifacts: dict[str, Artifact]
    inventories: dict[str, QuantizationInventory]
    paths: dict[str, Path]  # artifacts that go on to the levels stage, fp32 first
    loaded: dict[str, GraphIndex]  # their graph index, built once while inspecting (the levels stage takes it)
    fixed_dims: list[str] = field(default_factory=list)  # files whose inputs lost the upload's symbolic dims


def run_comparison(
    request: ComparisonRequest, workdir: Path, *, progress: Progress | None = None, report_id: str | None = None,
) -> Report:
    options = request.options
    workdir = Path(workdir).resolve()  # absolute: ORT's pre-processing changes the directory meanwhile
    run = _Run(art_dir=workdir / "artifacts", scratch=workdir / "scratch",
               notify=progress or (lambda stage, done, total: None))
    _clear_earlier_run(run.art_dir, request)
    run.art_dir.mkdir(parents=True, exist_ok=True)
    run.scratch.mkdir(exist_ok=True)
    seed_random_ops()  # before any session: a model's unseeded random ops draw the same numbers in every job
    quiet_ort_logs()

    prepared = prepare_stage(request, workdir, run)
    fp32 = fp32_stage(prepared, run, options, budgets=request.budgets)
    outcomes = quantize_stage(options, prepared, fp32, run, parallel=request.parallel_paths,
                              concurrent_jobs=request.concurrent_jobs,
                              pt2e_time_limit_s=options.pt2e.time_limit_s or request.pt2e_time_limit_s)
    inspected = inspect_stage(options, prepared, fp32, outcomes, run)
    # before the levels stage, which takes (and drops) the graphs the inspect stage parsed
    qoperator = _loaded_model(inspected, "ort_qoperator")
    dropped_activations = qoperator_dropped_relu_lints(_quantizer_input(run, fp32) if qoperator else None, qoperator)
    levels = analyze_levels(artifact_paths=inspected.paths, eval_feeds=prepared.samples.evaluation,
                            out_dir=run.art_dir, options=options, progress=run.notify, loaded=inspected.loaded,
                            concurrent_jobs=request.concurrent_jobs, keep_level_graphs=request.keep_level_graphs,
                            data_dependent=fp32.data_dependent_outputs())
    run.timings.update(levels.timings)
    layers, advice, refuted = layers_and_advice_stages(options, prepared, fp32, inspected, levels, outcomes, run,
                                                       parallel=request.parallel_paths,
                                                       concurrent_jobs=request.concurrent_jobs)
    artifacts = {name: _with_levels(art, levels.optimized[name]) if name in levels.optimized else art
                 for name, art in inspected.artifacts.items()}
    env = environment()
    with run.stage("decide"):
        decided = decided_from_levels(levels, inventories=inspected.inventories, options=options,
                                      batchnorm_in_source=_batchnorm_count(prepared.source.program), cpu=env.cpu,
                                      advice_measured=advice + refuted)
        verdict = verdict_from_artifacts(artifacts, options, list(options.gates), samples=prepared.samples.info)
    shutil.rmtree(run.scratch, ignore_errors=True)  # pre-processed copies; the artifacts are what users keep
    return Report(
        id=report_id, created_at=datetime.now(timezone.utc), environment=env, options=options,
        model=_model_info(prepared, fp32), samples=prepared.samples.info, artifacts=artifacts,
        agreement=levels.agreement, decisions=decided.decisions,
        lints=made_up_data_lints(prepared.samples.info) + list(decided.lints)
        + _symbolic_dim_lints(prepared.source.specs, prepared.shapes, options, inspected.fixed_dims)
        + random_op_lints(fp32.file.model) + fed_back_selection_lints(fp32.file.model)
        + dropped_activations
        + integer_weight_lints(fp32.file.model) + overridable_initializer_lints(fp32.file.model)
        + folded_input_lints(artifacts.get("pt2e_qdq"))
        + no_artifact_lints(artifacts, already_quantized=run.already_quantized)
        + padded_selection_lints(fp32.padded_selection())
        + repeated_weight_lints({n: a.file for n, a in artifacts.items() if a.file is not None})
        + (selection_input_lints(fp32.after_selection.read, layers, by_shape=bool(fp32.after_selection.moving))
           if fp32.after_selection.moving or fp32.padded_selection() else []),
        platform=decided.platform,
        advice=advice, advice_refuted=refuted, layers=layers, verdict=verdict, timings=dict(run.timings),
        cost=job_cost(run.timings, artifacts, options),
    )


def _loaded_model(inspected: Inspected, artifact: str):
    """The ModelProto of a file the inspect stage parsed (its graph only), or None when the path did not get there."""
    graph = inspected.loaded.get(artifact)
    return graph.model if graph is not None else None


def _quantizer_input(run: _Run, fp32: Fp32):
    """The graph of the file quantize_static read (pre-processed: its nodes are the ones ORT's quantizer saw)."""
    if run.ort_input is None or run.ort_input == fp32.file.path:
        return fp32.file.model
    return onnx.load(str(run.ort_input), load_external_data=False)


def _clear_earlier_run(art_dir: Path, request: ComparisonRequest) -> None:
    """An earlier run's artifacts out of the folder this run writes (a CLI --out used again, a job run
    again after its worker was lost): a path that fails now must not leave the last model's file under
    its name. Left alone when the upload itself lies in there (a model compared from its own folder)."""
    if not art_dir.is_dir():
        return
    inputs = [Path(p).resolve() for p in (request.model_path, request.calibration_path) if p is not None]
    if any(p.is_relative_to(art_dir.resolve()) for p in inputs):
        return
    try:
        for entry in art_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    except OSError as e:  # a read-only or someone else's --out: the machine's state, said as such
        raise error_from_os(e, "clearing the earlier run's files from the artifacts folder") or e


def _with_levels(art: Artifact, optimized: dict) -> Artifact:
    """The artifact with its levels; a file that ORT ran at no level is a failed path, not an ok one
    with an error in each level (a CI gate on status_ok must see it)."""
    update: dict = {"optimized": optimized}
    if art.name != "fp32":
        update["accuracy"], update["accuracy_note"] = artifact_accuracy(optimized)
    errors = [(level, ol.error) for level, ol in optimized.items() if ol.error]
    if art.status == "ok" and optimized and len(errors) == len(optimized):
        reference = " It is the fp32 reference, so no quantized file could be compared either." if art.name == "fp32" else ""
        update["status"] = "failed"
        update["error"] = PathError(
            stage="evaluate", code="ort_run_failed", type="OrtRunFailed",
            message=f"ONNX Runtime could not run this file at any level ({', '.join(lv for lv, _ in errors)}); "
                    f"at {errors[0][0]}: {errors[0][1]}.{reference}",
            hint="load the file in onnxruntime yourself and run one sample to see the same error; "
                 "ORT's message names the node it stopped at")
    return art.model_copy(update=update)


def prepare_stage(request: ComparisonRequest, workdir: Path, run: _Run) -> Prepared:
    """Load and check the model, resolve the input shapes, make the samples every path shares."""
    options = request.options
    with run.stage("prepare"):
        source = _source(request, workdir)
        # Dims the option leaves open come from the uploaded .npz (array headers only), then the batch rule.
        data_shapes = array_shapes_in_npz(request.calibration_path) if request.calibration_path is not None else None
        shapes, shape_notes = resolved_input_shapes(source.specs, options.input_shapes, data_shapes=data_shapes,
                                                    batch_dims=source.batch_dims)
        # Security: the declared-size check on the shapes samples are actually made with (dynamic dims
        # filled in from input_shapes), before any array is allocated (Budgets.max_input_elements).
        for input_name, input_shape in shapes.items():
            check_input_elements(input_name, input_shape, request.budgets)
        if request.calibration_path is None:  # an uploaded .npz is bounded by its upload limit
            check_sample_bytes(shapes, {s.name: s.dtype for s in source.specs},
                               options.calibration_samples + options.eval_samples, request.budgets)
        if request.calibration_path is not None:
            samples = samples_from_npz(request.calibration_path, source.specs, shapes, options)
        else:  # where the graph states an input's range (ids into a table, a normalization), draw in it
            ranges = input_ranges_from_onnx(source.onnx_model, source.specs) if source.onnx_model is not None else {}
            samples = generated_samples(source.specs, shapes, options, model_ranges=ranges)
    return Prepared(source=source, shapes=shapes, shape_notes=shape_notes, samples=samples)


def fp32_stage(prepared: Prepared, run: _Run, options: ComparisonOptions, *, budgets=None) -> Fp32:
    """The fp32 reference file (the upload, or exported from torch), read once for its metadata; its
    tensors at the job's shapes bounded before any session runs it."""
    source = prepared.source
    with run.stage("fp32"):
        path = fp32_onnx_from_source(source, run.art_dir / "fp32.onnx")
        model = source.onnx_model if source.onnx_model is not None else onnx.load(str(path), load_external_data=False)
        inferred = inferred_at_job_shapes(model, prepared.shapes)
        check_activation_bytes(inferred, budgets)
        refuse_if_fp32_cannot_run(path, inferred, prepared.samples, prepared.shapes, prepared.source.specs,
                                  options, model=model, budgets=budgets)
        after = tensors_after_selection(model, inferred)
    return Fp32(file=OnnxFile(path, model), histogram=dict(Counter(op_key(n) for n in all_nodes(model.graph))),
                after_selection=after)


def quantize_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, run: _Run, *,
                   parallel: bool | None = None, concurrent_jobs: Callable[[], int | None] | None = None,
                   pt2e_time_limit_s: float | None = None) -> dict[str, tuple[PathOutcome, float]]:
    """Each requested path, each failing alone: artifact -> (outcome, seconds).

    The PT2E path runs here and the ORT paths on a second thread when two cores are idle
    (``parallel`` None), or as ``parallel`` says (quantize/side_by_side.py).
    """
    requested = list(options.artifacts)
    source, samples = prepared.source, prepared.samples
    input_names = [s.name for s in source.specs]
    outcomes = {}
    with run.stage("quantize", len(requested)):
        ort_settings = resolved_ort_settings(options)
        # An upload that is already quantized is inspected as is, never quantized twice.
        already = quantization_in_model(fp32.file.model) if source.onnx_path else None
        run.already_quantized = already is not None
        counted = LockedProgress(run.notify)
        done = [0]

        def finished(name: str, outcome: PathOutcome, t0: float) -> None:
            outcomes[name] = (outcome, round(time.perf_counter() - t0, 4))
            done[0] += 1
            counted("quantize", done[0], len(requested))

        def pt2e_side() -> None:
            if "pt2e_qdq" not in requested:
                return
            t0 = time.perf_counter()
            if already is not None:
                outcome = run_path("pt2e_qdq", "quantize", skip_if_quantized, fp32.file.model)
            else:
                outcome = run_path("pt2e_qdq", "quantize", qdq_from_pt2e, source, prepared.shapes, samples.calibration,
                                   run.art_dir / "pt2e_qdq.onnx", per_channel=options.pt2e.per_channel,
                                   evaluation=samples.evaluation, max_graph_ops=options.pt2e.max_graph_ops,
                                   time_limit_s=pt2e_time_limit_s)
                if outcome.error is not None and outcome.error.code == PATH_TIME_LIMIT:
                    _remove_artifact_files(run.art_dir, "pt2e_qdq")  # stopped mid-way: a half-written file
            finished("pt2e_qdq", outcome, t0)

        def ort_side() -> None:
            ort_names = [n for n in requested if n != "pt2e_qdq"]
            if already is not None:
                for name in ort_names:
                    t0 = time.perf_counter()
                    finished(name, run_path(name, "quantize", skip_if_quantized, fp32.file.model), t0)
                return
            if not ort_names:
                return
            ort_input, ort_note = _input_for_ort(fp32, ort_settings, run)
            run.ort_input = ort_input  # the advice stage re-quantizes this same file
            for name in ort_names:
                t0 = time.perf_counter()
                outcome = run_path(name, "quantize", quantized_by_ort, ort_input, run.art_dir / f"{name}.onnx",
                                   samples.calibration, input_names,
                                   quant_format="qdq" if name == "ort_qdq" else "qoperator",
                                   settings=ort_settings, pre_process_note=ort_note,
                                   calibration_cache=run.scratch / "ort_calibration_ranges.json")
                finished(name, outcome, t0)

        idle = cores_idle(concurrent_jobs)
        both = (already is None and "pt2e_qdq" in requested and len(requested) > 1
                and (parallel if parallel is not None else idle))
        # torch takes every core unless told otherwise; with another job or load on them, its pool's threads
        # wait for each other (a CenterNet's PT2E path alone: 100 s on a loaded machine against 43 s on one
        # thread). Side by side each path has one core anyway (side_by_side).
        with nullcontext() if both or idle else torch_on_one_core():
            side_by_side(pt2e_side, ort_side, parallel=both)
        log.info("quantize: PT2E and ORT paths %s", "side by side on two cores" if both else "one after the other")
        _blame_stored_nonfinite(outcomes, fp32)
    return {name: outcomes[name] for name in requested}


def _remove_artifact_files(art_dir: Path, artifact: str) -> None:
    """What a stopped path left in the artifacts folder: before the levels stage, every
    ``<artifact>.*`` there is that path's own (its file, its external data)."""
    for leftover in art_dir.glob(f"{artifact}.*"):
        leftover.unlink(missing_ok=True)


def _blame_stored_nonfinite(outcomes: dict[str, tuple[PathOutcome, float]], fp32: Fp32) -> None:
    """A path that met NaN or inf while calibrating blames the samples; where the fp32 file stores
    NaN or inf in a weight, no sample fixes it, so its errors name the weight and say so instead."""
    failed = [o for o, _ in outcomes.values() if o.error is not None and o.error.type == "NonFiniteCalibration"]
    if not failed:
        return
    stored = nonfinite_weights(fp32.file.model, fp32.file.path.parent)
    if not stored:
        return
    name, bad, size = stored[0]
    more = f" (and {len(stored) - 1} more tensor(s))" if len(stored) > 1 else ""
    masked = selected_by_where(fp32.file.model, name)
    for outcome in failed:
        if masked is not None:  # a masked fill: the samples' mask decides, so the samples are the thing to change
            wheres, conditions, taken_when_true = masked
            named = ", ".join(map(repr, conditions)) or "the mask inputs"
            keep_out = {"constant": 0 if taken_when_true else 1}  # the condition that keeps the inf out
            example = {c: keep_out for c in conditions[:1]} or {"mask": keep_out}
            update = dict(
                message=f"{outcome.error.message} The fp32 file stores NaN or inf in weight {name!r} ({bad} of {size} "
                        f"values{more}), and selects it through Where {', '.join(map(repr, wheres))} where the "
                        f"condition computed from {named} says so: the samples' mask put it in this tensor.",
                hint=f"give {named} the values your deployment feeds (options.input_values, e.g. "
                     f"{json.dumps({'input_values': example})}, or an .npz); or replace the inf with a large finite "
                     "value (-1e4), or leave the nodes that read it in float (options.ort.nodes_to_exclude)")
        else:
            update = dict(
                message=f"{outcome.error.message} The fp32 file itself stores NaN or inf, which no calibration sample "
                        f"avoids: weight {name!r} holds {bad} of {size} values non-finite{more}.",
                hint="re-export the model from weights without NaN or inf (a diverged checkpoint), or, for a mask "
                     "stored with -inf, replace the inf with a large finite value (-1e4) or leave the nodes that read "
                     "it in float (options.ort.nodes_to_exclude), and upload again")
        outcome.error = outcome.error.model_copy(update=update)


# The largest fp32 model (file and external data) whose advice re-quantizations run beside the per-tensor
# table: past it they run after it, so a real-size model's peak of memory stays the table's alone.
BESIDE_LAYERS_MAX_MODEL_BYTES = 256 * 1024 * 1024


def layers_and_advice_stages(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected, levels,
                             outcomes: dict[str, tuple[PathOutcome, float]], run: _Run, *,
                             parallel: bool | None = None, concurrent_jobs: Callable[[], int | None] | None = None):
    """The per-tensor table, then the changes the blockers point to, re-run for real within options.advice's
    budget while the scratch folder (the pre-processed input, the calibration ranges) still exists:
    (layers, proposed advice, refuted advice).

    Neither the table nor advice's first phase (each candidate's re-quantized file, SQNR and int8 coverage)
    times anything, so with two idle cores the second core makes advice candidates while the first computes
    the table and then helps with the candidates left; advice's second phase then times each candidate
    alone. Not beside the table's exclude-and-retry (``layers.retry_k``), which times its files, nor for a
    model past ``BESIDE_LAYERS_MAX_MODEL_BYTES``: the table is the job's peak of memory, and a re-quantization
    beside it holds about twice the model again (960x960 detector: +0.2-0.5 GB on 4.8 GB). Their
    timings then split the wall time they shared in proportion to their own seconds, so the stages still
    add up to the job's time (the levels stage does the same)."""
    plan = None
    if options.advice.enabled:
        run.notify("advice", 0, 1)
        plan = advice_plan_for_job(
            levels.optimized, inspected.paths, options, ort_input=run.ort_input,
            ort_settings=resolved_ort_settings(options), samples=prepared.samples,
            input_names=[s.name for s in prepared.source.specs],
            calibration_cache=run.scratch / "ort_calibration_ranges.json",
            quantize_seconds={n: s for n, (_, s) in outcomes.items()}, reference=levels.reference_outputs)
    fp32_file = inspected.artifacts["fp32"].file
    beside = (plan is not None and options.layers.enabled and options.layers.retry_k <= 0
              and (fp32_file is not None and fp32_file.size <= BESIDE_LAYERS_MAX_MODEL_BYTES)
              and (parallel if parallel is not None else cores_idle(concurrent_jobs)))

    def make_advice() -> None:
        if plan is None:
            return
        try:
            plan.work()
        except Exception:  # noqa: BLE001 - advice is an extra; a failure here must not fail the comparison
            log.warning("advice failed; the report has none", exc_info=True)

    def layers_then_advice():
        layers = layers_stage(options, prepared, fp32, inspected, run)
        make_advice()  # the candidates the other thread has not taken (all of them, one after the other)
        return layers

    t0 = time.perf_counter()
    layers, _ = side_by_side(layers_then_advice, make_advice, parallel=beside)
    wall = time.perf_counter() - t0
    own = {"layers": run.timings.get("layers", 0.0) if layers is not None else 0.0,
           "advice": plan.seconds if plan is not None else 0.0}
    if beside:
        plan.beside = "the per-tensor table (layers), on two cores"
        own = {k: v * wall / sum(own.values()) for k, v in own.items()} if sum(own.values()) > 0 else own
        log.info("layers and advice's re-quantizations side by side on two cores")
    if layers is not None:
        run.timings["layers"] = round(own["layers"], 4)
    if not options.advice.enabled:
        return layers, [], []
    run.timings["advice"] = round(own["advice"], 4)
    with run.stage("advice"):  # timings["advice"]: what the re-runs cost this job
        try:
            advice, refuted = timed_advice(plan)
        except Exception:  # noqa: BLE001 - advice is an extra; a failure here must not fail the comparison
            log.warning("advice failed; the report has none", exc_info=True)
            advice, refuted = [], []
    return layers, advice, refuted


def _files_with_fixed_dims(specs, loaded: dict[str, GraphIndex]) -> list[str]:
    """The quantized files whose inputs lost the upload's symbolic dims (the PT2E file of an ONNX
    upload: torch.export of the converted module runs at the job's shapes)."""
    symbolic = {(s.name, i) for s in specs for i, d in enumerate(s.shape) if not isinstance(d, int)}
    out = []
    for name, g in loaded.items():
        dims = {(vi.name, i): d for vi in g.model.graph.input for i, d in enumerate(vi.type.tensor_type.shape.dim)}
        if name != "fp32" and any(key in dims and dims[key].HasField("dim_value") for key in symbolic):
            out.append(name)
    return out


def _symbolic_dim_lints(specs, shapes, options: ComparisonOptions, fixed_files: list[str] = ()) -> list[Lint]:
    """The artifacts keep the model's symbolic dims (but ``fixed_files``), yet every run here used one
    value for each."""
    fixed, chosen = [], []
    for spec in specs:
        for i, d in enumerate(spec.shape):
            if not isinstance(d, int) and spec.name in shapes and i < len(shapes[spec.name]):
                fixed.append(f"{spec.name}[{i}] '{d or '?'}' = {shapes[spec.name][i]}")
                chosen.append(spec.name in options.input_shapes)
    if not fixed:
        return []
    ran = ["calibration", "evaluation"] + [s for s, on in (("latency", options.latency.enabled),
                                                            ("advice", options.advice.enabled)) if on]
    keep = (f"the artifacts but {', '.join(fixed_files)} keep symbolic input dims ({', '.join(fixed_files)} "
            "fixes them at these sizes and runs at no other)" if fixed_files else "the artifacts keep symbolic input dims")
    return [Lint(code="symbolic_dims_measured_at_one_size", severity="warning" if fixed_files else "info",
                 message=f"{keep}, but {', '.join(ran)} ran with " + ", ".join(fixed),
                 hint=("the figures hold for these sizes, the ones options.input_shapes gives; a job per size you "
                       "deploy with measures the others" if all(chosen) else
                       "set options.input_shapes to measure the size you deploy with"))]


def _input_for_ort(fp32: Fp32, ort_settings: dict, run: _Run) -> tuple[Path, str | None]:
    """The file both ORT paths quantize: the fp32 model at an opset ORT quantizes, pre-processed."""
    ai_onnx = next((o.version for o in fp32.file.model.opset_import if o.domain in ("", "ai.onnx")), None)
    ort_input, opset_note = opset_for_ort(fp32.file.path, run.scratch / "fp32.opset13.onnx", opset=ai_onnx)
    ort_input, float32_note = float32_copy_for_ort(ort_input, run.scratch / "fp32.float32.onnx",
                                                   model=fp32.file.model if ort_input == fp32.file.path else None)
    ort_input, fix_note = fixed_for_ort_quantizer(
        ort_input, run.scratch / "fp32.ort_fixups.onnx",
        model=fp32.file.model if ort_input == fp32.file.path else None, identities=not ort_settings["pre_process"])
    notes = [opset_note, float32_note, fix_note]
    if ort_settings["pre_process"]:
        t0 = time.perf_counter()
        ort_input, pre_note = preprocessed_for_ort(ort_input, run.scratch / "fp32.preprocessed.onnx")
        run.timings["ort_pre_process"] = round(time.perf_counter() - t0, 4)
        notes.append(pre_note)
        # The Identity reroutes (outer-scope and Where reads) go on what quant_pre_process wrote:
        # its level-basic pass would remove them, and quantize_static still needs them.
        ort_input, post_note = fixed_for_ort_quantizer(ort_input, run.scratch / "fp32.preprocessed.ort_fixups.onnx")
        notes.append(post_note and post_note.replace("before quantize_static:", "after quant_pre_process:", 1))
    else:
        notes.append("quant_pre_process: off (options.ort.pre_process=false)")
    return ort_input, "; ".join(n for n in notes if n) or None


def inspect_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32,
                  outcomes: dict[str, tuple[PathOutcome, float]], run: _Run) -> Inspected:
    """What each file holds. Each quantized file is loaded once here; its index goes on to the levels."""
    source = prepared.source
    artifacts: dict[str, Artifact] = {}
    inventories: dict[str, QuantizationInventory] = {}
    paths: dict[str, Path] = {"fp32": fp32.file.path}
    loaded: dict[str, GraphIndex] = {}
    with run.stage("inspect", len(outcomes) + 1):
        artifacts["fp32"] = Artifact(
            name="fp32", status="ok", file=file_info_from_onnx(fp32.file.path, fp32.file.model),
            tool=ToolInfo(name="uploaded ONNX" if source.onnx_path else "torch.onnx.export(dynamo=True)",
                          version="", settings={}),
            quantization=inventory_from_onnx(fp32.file.model) if source.onnx_path else None,
            seconds=run.timings.get("fp32"),
        )
        for name, (outcome, secs) in outcomes.items():
            if not outcome.ok:
                # An ONNX upload's PT2E skip still reports its conversion (parity figure included).
                conversion = getattr(outcome.value, "to_dict", None)
                tool = ToolInfo(name=outcome.value.converter, version="", conversion=conversion()) if conversion else None
                artifacts[name] = Artifact(name=name, status="skipped" if outcome.skipped else "failed",
                                           error=outcome.error, seconds=secs, tool=tool)
                continue
            inspected = run_path(name, "inspect", _inspect, run.art_dir / f"{name}.onnx", fp32.histogram)
            if not inspected.ok:
                artifacts[name] = Artifact(name=name, status="failed", error=inspected.error, tool=outcome.value,
                                           seconds=secs)
                continue
            file, file_info, inventory = inspected.value
            inventories[name] = inventory
            paths[name] = file.path
            loaded[name] = file.index
            artifacts[name] = Artifact(name=name, status="ok", tool=outcome.value, file=file_info,
                                       quantization=inventory, seconds=secs)
    return Inspected(artifacts=artifacts, inventories=inventories, paths=paths, loaded=loaded,
                     fixed_dims=_files_with_fixed_dims(source.specs, loaded))


def layers_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected,
                 run: _Run) -> LayersReport | None:
    """Per-tensor error of each quantized file against fp32 (issue 15), after the levels stage wrote
    the optimized graphs; timed as ``timings.layers`` (its progress is part of ``evaluate``)."""
    t0 = time.perf_counter()
    layers = layers_for_comparison(
        options=options, paths=inspected.paths, eval_feeds=prepared.samples.evaluation,
        tools={n: a.tool for n, a in inspected.artifacts.items() if a.tool is not None}, out_dir=run.scratch,
        source=prepared.source, shapes=prepared.shapes, calibration=prepared.samples.calibration,
        input_names=[s.name for s in prepared.source.specs], ort_input=run.ort_input or fp32.file.path,
        ort_settings=resolved_ort_settings(options), fp32_model=fp32.file.model,
        optimized_paths={a: {lv: run.art_dir / f"{a}.{lv}.onnx" for lv in options.levels} for a in inspected.paths},
        data_dependent=fp32.after_selection.moving,
    )
    if layers is not None:
        run.timings["layers"] = round(time.perf_counter() - t0, 4)
    return layers


def _inspect(path: Path, fp32_hist: dict[str, int]) -> tuple[OnnxFile, FileInfo, QuantizationInventory]:
    file = OnnxFile.load(path)
    return (file, file_info_from_onnx(path, file.model),
            inventory_from_onnx(file.model, fp32_histogram=fp32_hist, index=file.index))


def _model_info(prepared: Prepared, fp32: Fp32) -> ModelInfo:
    source, model = prepared.source, fp32.file.model
    return ModelInfo(
        name=source.name, sha256=source.sha256, format=source.format,
        opset_imports={(o.domain or "ai.onnx"): o.version for o in model.opset_import},
        ir_version=model.ir_version,
        inputs=[TensorSpec(**s.to_dict()) for s in source.specs],
        outputs=[TensorSpec(**s.to_dict()) for s in output_specs_from_onnx(model)],
        node_count=sum(fp32.histogram.values()),
        resolved_input_shapes={k: list(v) for k, v in prepared.shapes.items()},
        shape_notes=prepared.shape_notes,
        notes=[n for n in (unused_domains_note(model),) if n] + source.notes,
    )


def _batchnorm_count(program) -> int:
    if program is None:
        return 0
    return sum(1 for n in program.graph.nodes
               if n.op == "call_function" and "batch_norm" in str(getattr(n.target, "__name__", n.target)))
