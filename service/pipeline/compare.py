"""One comparison, start to finish: the framework-free core the CLI and the workers call.

    prepare   load + check the model, resolve input shapes, make the shared samples  inputs/stage.py
    fp32      the fp32 ONNX reference (uploaded, or exported from torch)             fp32/stage.py
    quantize  pt2e_qdq | ort_qdq | ort_qoperator, each failing alone                 quantize/stage.py
    inspect   what each file writes                                                  inspect/stage.py
    optimize  each artifact x each ORT level: the graph ORT runs, diffed level to level
    evaluate  numerics vs fp32 (untimed, on the job's cores)                         runtime/stage.py
    latency   at options.latency_levels, each graph timed alone                      runtime/stage.py
    platforms the same on each emulated platform options.platforms names (arm64)     platforms/stage.py
    layers    per-tensor error against fp32                                          layers/layers_stage.py
    advice    the changes the blockers point to, re-run and measured                 advice/stage.py
              (the two share one budget, extras_budget.py: advice's best candidate first, then the table
              at its minimum samples, further candidates, further samples)
    decide    artifacts' final status, decisions, lints, platform notes, verdict     verdict/decide.py

``run_comparison`` calls one function per stage, each as ``stage(options, <earlier results>, ctx)``,
each returning a typed value the later ones read; ``ctx`` (context.py) is frozen. The steps above are
``stages.STEPS``, in the order they run. The spine alone keeps the clock, and builds the report once,
at the end; ``on_section`` gets the report as it comes, each section as it is finished (sections.py).
``options.depth`` says how far it goes.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import replace
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from service.errors import error_from_os
from service.pipeline.context import ComparisonRequest, Folders, Progress, StageContext
from service.pipeline.cores import CoreShare, job_in_ledger
from service.pipeline.environment import environment
from service.pipeline.fp32.stage import Fp32, fp32_stage
from service.pipeline.inputs.specs import output_specs_from_onnx
from service.pipeline.inputs.stage import Prepared, prepare_stage
from service.pipeline.inspect.domains import unused_domains_note
from service.pipeline.inspect.stage import Inspected, inspect_stage
from service.pipeline.layers.layers_stage import (
    Layered, TableTurn, layers_stage, shared_first_samples, table_for_job,
)
from service.pipeline.ort.sessions import quiet_ort_logs, seed_random_ops
from service.pipeline.platforms.notes import notes_with_platforms
from service.pipeline.platforms.stage import emulated_platforms, platforms_stage
from service.pipeline.platforms.targets.gates import target_gate_result
from service.pipeline.platforms.targets.lints import target_lints
from service.pipeline.verdict.gates import verdict_from_artifacts
from service.pipeline.verdict.lints import checked_lints
from service.pipeline.quantize.stage import quantize_stage
from service.pipeline.runtime.parallel_runs import ACCURACY_HOW
from service.pipeline.runtime.stage import levels_stage
from service.pipeline.sections import ADVICE, FILES, LAYERS, LEVEL_GRAPHS, OnSection, Sections
from service.pipeline.advice.advice import AdvicePlan
from service.pipeline.extras_budget import extras_budget, may_share_table_runs
from service.pipeline.advice.stage import (
    Advised, advice_candidates, advice_stage, best_candidate_measured, made_candidates,
)
from service.pipeline.advice.extras_spent import extras_spent
from service.pipeline.verdict.decide import Decided, Earlier, decide_stage, levels_so_far
from service.pipeline.verdict.headline import headline_from_report
from service.pipeline.verdict.job_cost import job_cost
from service.pipeline.verdict.made_up_data import made_up_data_banner
from service.pipeline.verdict.not_measured import not_measured
from service.schemas.options import ComparisonOptions
from service.schemas.report import JobCores, ModelInfo, Report, TensorSpec

__all__ = ["ComparisonRequest", "run_comparison"]

log = logging.getLogger(__name__)

# The largest fp32 model (file and external data) whose advice re-quantizations run beside the per-tensor
# table: past it they run after it, so a real-size model's peak of memory stays the table's alone.
BESIDE_LAYERS_MAX_MODEL_BYTES = 256 * 1024 * 1024


class _Clock:
    """Each stage's seconds (``Report.timings``), kept by the spine alone; a stage's start is its progress."""

    def __init__(self, notify: Progress):
        self.notify = notify
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, total: int = 1):
        self.notify(name, 0, total)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add({name: time.perf_counter() - t0})

    def add(self, seconds: dict[str, float]) -> None:
        for name, s in seconds.items():
            self.timings[name] = round(self.timings.get(name, 0.0) + s, 4)

    def split(self, stage: str, parts: dict[str, float]) -> None:
        """``parts`` of ``stage``'s time under their own names, taken out of the stage's: the timings still
        add up to the job's time (``JobCost.job_seconds`` is their sum)."""
        self.add(parts)
        self.timings[stage] = round(max(0.0, self.timings.get(stage, 0.0) - sum(parts.values())), 4)


def _job_cores(share: CoreShare) -> JobCores:
    cores, low, high = share.cores_used()
    return JobCores(cores=cores, source=share.why(), how=ACCURACY_HOW.format(cores=cores),
                    low=low if low != high else None, high=high if low != high else None)


def run_comparison(
    request: ComparisonRequest, workdir: Path, *, progress: Progress | None = None, report_id: str | None = None,
    on_section: OnSection | None = None,
) -> Report:
    """The comparison; ``on_section(name, partial report)`` as each section is done (sections.py). The job
    holds its place in the machine's cores ledger while it runs (cores.py)."""
    with job_in_ledger(request.cores_ledger, report_id, cap=request.job_cores,
                       cap_source=request.job_cores_source) as share:
        return _run(request, workdir, share, progress=progress, report_id=report_id, on_section=on_section)


def _run(request: ComparisonRequest, workdir: Path, share: CoreShare, *, progress: Progress | None,
         report_id: str | None, on_section: OnSection | None) -> Report:
    options = request.options
    started = time.perf_counter()
    sections = Sections(on_section)
    workdir = Path(workdir).resolve()  # absolute: ORT's pre-processing changes the directory meanwhile
    folders = Folders(workdir=workdir, artifacts=workdir / "artifacts", scratch=workdir / "scratch")
    _clear_earlier_run(folders.artifacts, request)
    folders.artifacts.mkdir(parents=True, exist_ok=True)
    folders.scratch.mkdir(exist_ok=True)
    seed_random_ops()  # before any session: a model's unseeded random ops draw the same numbers in every job
    quiet_ort_logs()
    ctx = StageContext(request=request, folders=folders, notify=progress or (lambda stage, done, total: None),
                       share=share)
    clock = _Clock(ctx.notify)

    with clock.stage("prepare"):
        prepared = prepare_stage(options, ctx)
    with clock.stage("fp32"):
        fp32 = fp32_stage(options, prepared, ctx)
    with clock.stage("quantize", len(options.artifacts)):
        quantized = quantize_stage(options, prepared, fp32, ctx)
    clock.split("quantize", quantized.timings)
    with clock.stage("inspect", len(quantized.outcomes) + 1):
        inspected = inspect_stage(options, prepared, fp32, quantized, ctx, fp32_seconds=clock.timings.get("fp32"))
    sections.publish(FILES, id=report_id, created_at=datetime.now(timezone.utc), environment=environment(),
                     options=options, model=_model_info(prepared, fp32), samples=prepared.samples.info,
                     artifacts=inspected.artifacts, not_measured=not_measured(options))
    # The per-tensor table's first samples are the accuracy runs at disable_all: run once, for both.
    table = table_for_job(options, prepared, fp32, inspected, ctx) if may_share_table_runs(options) else None
    levels = levels_stage(options, prepared, fp32, inspected, ctx, on_section=lambda name, so_far: sections.publish(
        name, **(levels_so_far(options, prepared, inspected, so_far, decisions=name == LEVEL_GRAPHS)
                 if sections.listening else {})),  # no reader (the CLI): the final report holds them all
        disable_all_runs=shared_first_samples(table, prepared))
    clock.add(levels.timings)
    platforms = {}
    if emulated_platforms(options):
        with clock.stage("platforms"):
            platforms = platforms_stage(options, prepared, fp32, inspected, levels, ctx)
    # The extras (advice, the per-tensor table) share one budget, spent in order (extras_budget.py).
    shared_table = table.seconds if table is not None and table.reused else 0.0
    extras = extras_budget(options, essentials_seconds=time.perf_counter() - started - shared_table)
    extras.charge(shared_table)
    extras.start()
    plan = advice_candidates(options, prepared, quantized, inspected, levels, ctx, budget=extras)
    best_candidate_measured(plan)
    if plan is not None:
        extras.hold_for(plan.reserve_seconds)
    beside = _advice_beside_layers(options, plan, inspected, ctx)
    layered = layers_stage(options, prepared, fp32, quantized, inspected, ctx, TableTurn(
        table=table, extras=extras, beside=(lambda: made_candidates(plan)) if beside else None))
    if layered.report is not None:
        sections.publish(LAYERS, layers=layered.report)
    advised = advice_stage(options, plan, ctx, made_beside="the per-tensor table (layers), on two cores" if beside else None)
    if plan is not None:
        sections.publish(ADVICE, advice=advised.proposed, advice_refuted=advised.refuted, advice_not_run=advised.not_run)
    clock.add(_layers_and_advice_seconds(options, layered, advised, beside=beside))
    with clock.stage("decide"):
        decided = decide_stage(options, Earlier(prepared=prepared, fp32=fp32, quantized=quantized, inspected=inspected,
                                                levels=levels, layers=layered.report, advised=advised), ctx)
    shutil.rmtree(folders.scratch, ignore_errors=True)  # pre-processed copies; the artifacts are what users keep
    decided = _with_platform_findings(decided, options, prepared, platforms)
    report = sections.final(
        artifacts=decided.artifacts, agreement=levels.agreement, decisions=decided.decisions, lints=decided.lints,
        platform=notes_with_platforms(decided.platform, platforms), platforms=platforms,
        advice=advised.proposed, advice_refuted=advised.refuted, advice_not_run=advised.not_run,
        layers=layered.report, verdict=decided.verdict,
        timings=dict(clock.timings), cost=job_cost(clock.timings, decided.artifacts, options),
        job_cores=_job_cores(share), extras=extras_spent(extras, options, layered.report, advised, plan),
    )
    return report.model_copy(update={"headline": headline_from_report(
        report.model_dump(mode="json"), made_up_data=made_up_data_banner(report.samples))})


def _with_platform_findings(decided: Decided, options: ComparisonOptions, prepared, platforms: dict) -> Decided:
    """Gates on a target read ``platforms.<name>`` (a stage after the verdict's); the targets' failures and
    differences become lints."""
    if not platforms:
        return decided
    return replace(decided, lints=checked_lints(decided.lints + target_lints(platforms)),
                   verdict=verdict_from_artifacts(decided.artifacts, options, list(options.gates),
                                                  samples=prepared.samples.info, platforms=platforms,
                                                  platform_gate=target_gate_result))


def _advice_beside_layers(options: ComparisonOptions, plan: AdvicePlan | None, inspected: Inspected,
                          ctx: StageContext) -> bool:
    """Whether advice's first phase (each candidate's re-quantized file, SQNR and int8 coverage: nothing
    timed) runs on the second core while the first computes the per-tensor table. Not beside the table's
    exclude-and-retry (``layers.retry_k``), which times its files, nor for a model past
    ``BESIDE_LAYERS_MAX_MODEL_BYTES``: the table is the job's peak of memory, and a re-quantization
    beside it holds about twice the model again (960x960 detector: +0.2-0.5 GB on 4.8 GB)."""
    fp32_file = inspected.artifacts["fp32"].file
    return (plan is not None and options.layers.enabled and options.layers.retry_k <= 0
            and fp32_file is not None and fp32_file.size <= BESIDE_LAYERS_MAX_MODEL_BYTES and ctx.two_threads())


def _layers_and_advice_seconds(options: ComparisonOptions, layered: Layered, advised: Advised, *,
                               beside: bool) -> dict[str, float]:
    """``timings.layers`` and ``timings.advice``. Side by side, the two split the wall time they shared in
    proportion to their own seconds, so the stages still add up to the job's time."""
    own = {"layers": layered.seconds, "advice": advised.made_seconds}
    if beside:
        if sum(own.values()) > 0:
            own = {k: v * layered.wall / sum(own.values()) for k, v in own.items()}
        log.info("layers and advice's re-quantizations side by side on two cores")
    out = {}
    if layered.report is not None:
        out["layers"] = own["layers"]
    if options.advice.enabled:
        out["advice"] = advised.first_seconds + own["advice"] + advised.timed_seconds
    return out


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
