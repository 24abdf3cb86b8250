"""The quantize stage: each requested path (pt2e_qdq, ort_qdq, ort_qoperator; the tool paths nncf_qdq,
modelopt_qdq, quark_qdq) on the same calibration samples, each failing alone, then the files the user brought
(artifact.<name>); an upload that is quantized already is quantized by no path."""

from __future__ import annotations

import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from service.pipeline.context import StageContext
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inputs.stored_nonfinite import nonfinite_weights, selected_by_where
from service.pipeline.isolation import PATH_TIME_LIMIT, PathOutcome, run_path
from service.pipeline.quantize.already_quantized import quantization_in_model, skip_if_quantized
from service.pipeline.quantize.tools.brought import brought_artifact, checked_brought_file, refuse_unknown_artifacts
from service.pipeline.quantize.float32_copy import float32_copy_for_ort
from service.pipeline.quantize.onnx_cleanup import opset_for_ort
from service.pipeline.quantize.ort_fixups import fixed_for_ort_quantizer
from service.pipeline.quantize.ort_quant import preprocessed_for_ort, quantized_by_ort
from service.pipeline.quantize.pt2e import Pt2eInput, qdq_from_pt2e
from service.pipeline.quantize.side_by_side import LockedProgress, side_by_side, torch_on_one_core
from service.pipeline.quantize.tools.tool_paths import TOOL_PATHS, quantized_by_tool
from service.pipeline.vocabulary import ai_onnx_opset
from service.schemas.options import ComparisonOptions, resolved_ort_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Quantized:
    outcomes: dict[str, tuple[PathOutcome, float]]  # artifact -> (outcome, seconds), in the order asked
    # The fp32 file both ORT paths quantized (opset raised, float32, fixed, pre-processed): the per-tensor
    # table's retries and advice's re-quantizations start from this same file. None: no ORT path ran.
    ort_input: Path | None = None
    already_quantized: bool = False  # the upload was quantized already: inspected as is, quantized by no path
    timings: dict[str, float] = field(default_factory=dict)  # parts of the stage, timed apart: ort_pre_process
    # The ORT quantizer's settings as the ORT paths used them (options.ort over its preset), resolved once
    # here: the lints, the per-tensor table's retries and advice's re-quantizations read these.
    ort_settings: dict = field(default_factory=dict)
    # How ``ort_input`` was made from the fp32 file, step by step (advice's recipe states them): each
    # {"call": ORT's public function or None for a step of quantcompare's own, "kwargs", "what"}.
    ort_steps: list[dict] = field(default_factory=list)


def quantize_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, ctx: StageContext) -> Quantized:
    """Each requested path, each failing alone.

    The PT2E path runs here and the ORT paths on a second thread when the job has two cores
    (``request.parallel_paths`` None), or as it says (quantize/side_by_side.py).
    """
    request = ctx.request
    art_dir, scratch = ctx.folders.artifacts, ctx.folders.scratch
    pt2e_time_limit_s = options.pt2e.time_limit_s or request.limits.pt2e_time_limit_s
    timings: dict[str, float] = {}
    ort_input: list[Path] = []  # the file the ORT paths quantized, set by their thread
    ort_steps: list[dict] = []
    brought = dict(request.artifact_paths)
    refuse_unknown_artifacts(options, brought)
    # Before anything runs: a file that fails the upload checks, or is another model, is refused, not compared.
    brought_models = {name: checked_brought_file(name, path, fp32.file.model, request.limits.budgets)
                      for name, path in brought.items()}
    requested = list(options.artifacts) + list(brought)
    source, samples = prepared.source, prepared.samples
    input_names = [s.name for s in source.specs]
    outcomes = {}
    ort_settings = resolved_ort_settings(options)
    # An upload that is already quantized is inspected as is, never quantized twice.
    already = quantization_in_model(fp32.file.model) if source.onnx_path else None
    counted = LockedProgress(ctx.notify)
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
            pt2e_input = Pt2eInput(source, prepared.shapes, samples.calibration, evaluation=samples.evaluation,
                                   per_channel=options.pt2e.per_channel, max_graph_ops=options.pt2e.max_graph_ops)
            outcome = run_path("pt2e_qdq", "quantize", qdq_from_pt2e, pt2e_input, art_dir / "pt2e_qdq.onnx",
                               time_limit_s=pt2e_time_limit_s)
            if outcome.error is not None and outcome.error.code == PATH_TIME_LIMIT:
                _remove_artifact_files(art_dir, "pt2e_qdq")  # stopped mid-way: a half-written file
        finished("pt2e_qdq", outcome, t0)

    def ort_side() -> None:
        ort_names = [n for n in requested if n in ("ort_qdq", "ort_qoperator")]
        if already is not None:
            for name in ort_names:
                t0 = time.perf_counter()
                finished(name, run_path(name, "quantize", skip_if_quantized, fp32.file.model), t0)
            return
        if not ort_names:
            return
        path, ort_note = _input_for_ort(fp32, ort_settings, scratch, timings, ort_steps)
        ort_input.append(path)
        for name in ort_names:
            t0 = time.perf_counter()
            outcome = run_path(name, "quantize", quantized_by_ort, path, art_dir / f"{name}.onnx",
                               samples.calibration, input_names,
                               quant_format="qdq" if name == "ort_qdq" else "qoperator",
                               settings=ort_settings, pre_process_note=ort_note,
                               calibration_cache=scratch / "ort_calibration_ranges.json")
            finished(name, outcome, t0)

    idle = ctx.two_threads()  # two cores of the machine's ledger are this job's (pipeline/cores.py)
    both = already is None and "pt2e_qdq" in requested and any(n in ("ort_qdq", "ort_qoperator") for n in requested) \
        and idle
    # torch takes every core unless told otherwise; with another job or load on them, its pool's threads
    # wait for each other (a CenterNet's PT2E path alone: 100 s on a loaded machine against 43 s on one
    # thread). Side by side each path has one core anyway (side_by_side).
    with nullcontext() if both or idle else torch_on_one_core():
        side_by_side(pt2e_side, ort_side, parallel=both)
    log.info("quantize: PT2E and ORT paths %s", "side by side on two cores" if both else "one after the other")
    for name in (n for n in requested if n in TOOL_PATHS):  # subprocesses, after the in-process paths
        t0 = time.perf_counter()
        finished(name, _tool_path(name, options, fp32, samples.calibration, ctx, ort_settings,
                                  already=already is not None), t0)
    for name, path in brought.items():
        t0 = time.perf_counter()
        finished(name, run_path(name, "quantize", brought_artifact, name, path, art_dir / f"{name}.onnx",
                                brought_models[name]), t0)
    _blame_stored_nonfinite(outcomes, fp32)
    return Quantized(ort_settings=ort_settings, outcomes={name: outcomes[name] for name in requested},
                     ort_input=ort_input[0] if ort_input else None, already_quantized=already is not None,
                     timings=timings, ort_steps=ort_steps)


def _tool_path(name: str, options: ComparisonOptions, fp32: Fp32, calibration, ctx: StageContext,
               ort_settings: dict, *, already: bool) -> PathOutcome:
    """The tool path ``name`` (nncf_qdq, modelopt_qdq, quark_qdq) on the fp32 file as it is, in a subprocess."""
    if already:
        return run_path(name, "quantize", skip_if_quantized, fp32.file.model)
    return run_path(name, "quantize", quantized_by_tool, name, fp32.file.path, ctx.folders.artifacts / f"{name}.onnx",
                    calibration, ort_settings, preset=getattr(options.tool_presets, name),
                    scratch=ctx.folders.scratch)


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


def _input_for_ort(fp32: Fp32, ort_settings: dict, scratch: Path, timings: dict[str, float],
                   steps: list[dict]) -> tuple[Path, str | None]:
    """The file both ORT paths quantize: the fp32 model at an opset ORT quantizes, pre-processed; each
    step that wrote a file is appended to ``steps``."""
    def own(before: Path, after: Path, note: str | None, what: str) -> None:
        if after != before:  # a step of quantcompare's own wrote a new file: no public call repeats it
            steps.append({"call": None, "kwargs": {}, "what": f"{what}: {note or 'changed the file'}"})

    ort_input, opset_note = opset_for_ort(fp32.file.path, scratch / "fp32.opset13.onnx",
                                          opset=ai_onnx_opset(fp32.file.model))
    own(fp32.file.path, ort_input, opset_note, "quantize.onnx_cleanup.opset_for_ort")
    before = ort_input
    ort_input, float32_note = float32_copy_for_ort(ort_input, scratch / "fp32.float32.onnx",
                                                   model=fp32.file.model if ort_input == fp32.file.path else None)
    own(before, ort_input, float32_note, "quantize.float32_copy.float32_copy_for_ort")
    before = ort_input
    ort_input, fix_note = fixed_for_ort_quantizer(
        ort_input, scratch / "fp32.ort_fixups.onnx",
        model=fp32.file.model if ort_input == fp32.file.path else None, identities=not ort_settings["pre_process"])
    own(before, ort_input, fix_note, "quantize.ort_fixups.fixed_for_ort_quantizer")
    notes = [opset_note, float32_note, fix_note]
    if ort_settings["pre_process"]:
        t0 = time.perf_counter()
        before = ort_input
        ort_input, pre_note = preprocessed_for_ort(ort_input, scratch / "fp32.preprocessed.onnx", steps)
        timings["ort_pre_process"] = round(time.perf_counter() - t0, 4)
        notes.append(pre_note)
        # The Identity reroutes (outer-scope and Where reads) go on what quant_pre_process wrote:
        # its level-basic pass would remove them, and quantize_static still needs them.
        before = ort_input
        ort_input, post_note = fixed_for_ort_quantizer(ort_input, scratch / "fp32.preprocessed.ort_fixups.onnx")
        own(before, ort_input, post_note, "quantize.ort_fixups.fixed_for_ort_quantizer")
        notes.append(post_note and post_note.replace("before quantize_static:", "after quant_pre_process:", 1))
    else:
        notes.append("quant_pre_process: off (options.ort.pre_process=false)")
    return ort_input, "; ".join(n for n in notes if n) or None
