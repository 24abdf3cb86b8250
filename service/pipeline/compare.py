"""One comparison, start to finish: the framework-free core the CLI and the workers call.

    prepare   load + check the model, resolve input shapes, make the shared samples
    fp32      the fp32 ONNX reference (uploaded, or exported from torch)
    quantize  pt2e_qdq | ort_qdq | ort_qoperator, each failing alone
    inspect   what each file writes
    optimize  each artifact x each ORT level: the graph ORT runs, diffed level to level
    evaluate  numerics vs fp32, latency
    decide    decisions, lints, gate verdict
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from service.errors import InvalidOptions
from service.pipeline.environment import environment
from service.pipeline.inputs import sources
from service.pipeline.inputs.fp32 import fp32_onnx_from_source
from service.pipeline.inputs.safety import check_input_elements, check_sample_bytes, sniff_model_format
from service.pipeline.inputs.samples import Samples, generated_samples, samples_from_npz
from service.pipeline.inputs.specs import output_specs_from_onnx, resolved_input_shapes
from service.pipeline.inspect.inventory import file_info_from_onnx, inventory_from_onnx
from service.pipeline.options import ComparisonOptions, resolved_ort_settings
from service.pipeline.quantize.already_quantized import quantization_in_model, skip_if_quantized
from service.pipeline.quantize.isolation import run_path
from service.pipeline.quantize.onnx_cleanup import opset_for_ort
from service.pipeline.quantize.ort_quant import preprocessed_for_ort, quantized_by_ort
from service.pipeline.quantize.pt2e import qdq_from_pt2e
from service.pipeline.runtime.levels import analyze_levels
from service.pipeline.verdict.gates import verdict_from_report
from service.pipeline.verdict.platform_notes import platform_notes
from service.pipeline.vocabulary import all_nodes, op_key
from service.schemas.report import Artifact, ModelInfo, Report, TensorSpec, ToolInfo, Verdict

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
STAGES = ("prepare", "fp32", "quantize", "inspect", "optimize", "evaluate", "decide")


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
    return sources.source_from_onnx(request.model_path, name=name, budgets=request.budgets)


def run_comparison(
    request: ComparisonRequest, workdir: Path, *, progress: Progress | None = None, report_id: str | None = None,
) -> Report:
    import onnx

    options = request.options
    workdir = Path(workdir)
    art_dir = workdir / "artifacts"
    art_dir.mkdir(parents=True, exist_ok=True)
    scratch = workdir / "scratch"
    scratch.mkdir(exist_ok=True)
    timings: dict[str, float] = {}
    notify = progress or (lambda stage, done, total: None)

    @contextmanager
    def stage(name: str, total: int = 1):
        notify(name, 0, total)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            timings[name] = round(timings.get(name, 0.0) + time.perf_counter() - t0, 4)

    # prepare ---------------------------------------------------------------------------------
    with stage("prepare"):
        source = _source(request, workdir)
        shapes, shape_notes = resolved_input_shapes(source.specs, options.input_shapes)
        # Security: the declared-size check on the shapes samples are actually made with (dynamic dims
        # filled in from input_shapes), before any array is allocated (Budgets.max_input_elements).

        for input_name, input_shape in shapes.items():
            check_input_elements(input_name, input_shape, request.budgets)
        if request.calibration_path is None:  # an uploaded .npz is bounded by its upload limit
            check_sample_bytes(shapes, {s.name: s.dtype for s in source.specs},
                               options.calibration_samples + options.eval_samples, request.budgets)
        if request.calibration_path is not None:
            samples: Samples = samples_from_npz(request.calibration_path, source.specs, shapes, options)
        else:
            samples = generated_samples(source.specs, shapes, options)
    input_names = [s.name for s in source.specs]

    # fp32 ------------------------------------------------------------------------------------
    artifacts: dict[str, Artifact] = {}
    paths: dict[str, Path] = {}
    with stage("fp32"):
        fp32_path = fp32_onnx_from_source(source, art_dir / "fp32.onnx")
        fp32_model = source.onnx_model if source.onnx_model is not None else onnx.load(str(fp32_path), load_external_data=False)
        paths["fp32"] = fp32_path
    fp32_hist = dict(Counter(op_key(n) for n in all_nodes(fp32_model.graph)))

    # quantize --------------------------------------------------------------------------------
    requested = list(options.artifacts)
    with stage("quantize", len(requested)):
        outcomes = {}
        ort_settings = resolved_ort_settings(options)

        # An upload that is already quantized is inspected as is, never quantized twice.
        already = quantization_in_model(fp32_model) if source.onnx_path else None
        ort_input, ort_notes = fp32_path, []
        if already is None and any(a.startswith("ort_") for a in requested):
            ai_onnx = next((o.version for o in fp32_model.opset_import if o.domain in ("", "ai.onnx")), None)
            ort_input, opset_note = opset_for_ort(fp32_path, scratch / "fp32.opset13.onnx", opset=ai_onnx)
            ort_notes.append(opset_note)
            if ort_settings["pre_process"]:
                t0 = time.perf_counter()
                ort_input, pre_note = preprocessed_for_ort(ort_input, scratch / "fp32.preprocessed.onnx")
                timings["ort_pre_process"] = round(time.perf_counter() - t0, 4)
                ort_notes.append(pre_note)
            else:
                ort_notes.append("quant_pre_process: off (options.ort.pre_process=false)")
        ort_note = "; ".join(n for n in ort_notes if n) or None
        done = 0
        for name in requested:
            out = art_dir / f"{name}.onnx"
            t0 = time.perf_counter()
            if already is not None:
                outcome = run_path(name, "quantize", skip_if_quantized, fp32_model)
            elif name == "pt2e_qdq":
                outcome = run_path(name, "quantize", qdq_from_pt2e, source, shapes, samples.calibration, out,
                                   per_channel=options.pt2e.per_channel, evaluation=samples.evaluation)
            else:
                outcome = run_path(name, "quantize", quantized_by_ort, ort_input, out, samples.calibration,
                                   input_names, quant_format="qdq" if name == "ort_qdq" else "qoperator",
                                   settings=ort_settings, pre_process_note=ort_note,
                                   calibration_cache=scratch / "ort_calibration_ranges.json")
            outcomes[name] = (outcome, round(time.perf_counter() - t0, 4))
            done += 1
            notify("quantize", done, len(requested))

    # inspect ---------------------------------------------------------------------------------
    inventories = {}
    with stage("inspect", len(requested) + 1):
        artifacts["fp32"] = Artifact(
            name="fp32", status="ok", file=file_info_from_onnx(fp32_path, fp32_model),
            tool=ToolInfo(name="uploaded ONNX" if source.onnx_path else "torch.onnx.export(dynamo=True)",
                          version="", settings={}),
            quantization=inventory_from_onnx(fp32_model) if source.onnx_path else None,
            seconds=timings.get("fp32"),
        )
        for name in requested:
            outcome, secs = outcomes[name]
            if not outcome.ok:
                # An ONNX upload's PT2E skip still reports its conversion (parity figure included).
                conversion = getattr(outcome.value, "to_dict", None)
                tool = ToolInfo(name=outcome.value.converter, version="", conversion=conversion()) if conversion else None
                artifacts[name] = Artifact(name=name, status="skipped" if outcome.skipped else "failed",
                                           error=outcome.error, seconds=secs, tool=tool)
                continue
            path = art_dir / f"{name}.onnx"
            inspected = run_path(name, "inspect", _inspect, path, fp32_hist)
            if not inspected.ok:
                artifacts[name] = Artifact(name=name, status="failed", error=inspected.error, tool=outcome.value,
                                           seconds=secs)
                continue
            file_info, inventory = inspected.value
            inventories[name] = inventory
            paths[name] = path
            artifacts[name] = Artifact(name=name, status="ok", tool=outcome.value, file=file_info,
                                       quantization=inventory, seconds=secs)

    # optimize + evaluate (+ decisions and lints) ---------------------------------------------

    levels = analyze_levels(artifact_paths=paths, eval_feeds=samples.evaluation, out_dir=art_dir,
                            options=options, inventories=inventories, progress=notify,
                            batchnorm_in_source=_batchnorm_count(source.program))
    for name, per_level in levels.optimized.items():
        if name in artifacts:
            artifacts[name] = artifacts[name].model_copy(update={"optimized": per_level})
    timings.update(levels.timings)

    model_info = ModelInfo(
        name=source.name, sha256=source.sha256, format=source.format,
        opset_imports={(o.domain or "ai.onnx"): o.version for o in fp32_model.opset_import},
        ir_version=fp32_model.ir_version,
        inputs=[TensorSpec(**s.to_dict()) for s in source.specs],
        outputs=[TensorSpec(**s.to_dict()) for s in output_specs_from_onnx(fp32_model)],
        node_count=sum(fp32_hist.values()),
        resolved_input_shapes={k: list(v) for k, v in shapes.items()},
        shape_notes=shape_notes + source.notes,
    )
    env = environment()
    report = Report(
        id=report_id, created_at=datetime.now(timezone.utc), environment=env, options=options,
        model=model_info, samples=samples.info, artifacts=artifacts, agreement=levels.agreement,
        decisions=levels.decisions, lints=levels.lints, platform=platform_notes(levels.optimized, env.cpu),
        verdict=Verdict(passed=True), timings=timings,
    )
    with stage("decide"):
        report = report.model_copy(update={"verdict": verdict_from_report(report, list(options.gates))})
    report = report.model_copy(update={"timings": dict(timings)})
    shutil.rmtree(scratch, ignore_errors=True)  # pre-processed copies; the artifacts are what users keep
    return report


def _batchnorm_count(program) -> int:
    if program is None:
        return 0
    return sum(1 for n in program.graph.nodes
               if n.op == "call_function" and "batch_norm" in str(getattr(n.target, "__name__", n.target)))


def _inspect(path: Path, fp32_hist: dict[str, int]):
    import onnx

    model = onnx.load(str(path))
    return file_info_from_onnx(path, model), inventory_from_onnx(model, fp32_histogram=fp32_hist)
