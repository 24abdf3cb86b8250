"""The decide stage: what the earlier stages measured means, for a person and for CI.

Reads what the earlier stages measured (the levels results, each file's inventory, the per-tensor
table, advice) and computes nothing about ORT itself: each artifact's final status, the decisions
table, every lint of the report (the registry's, ``lints/``, run here over every stage's results), where
this machine differs from the chapter, and the gate verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.pipeline.context import StageContext
from service.pipeline.environment import cpu_info
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.quantize.stage import Quantized
from service.pipeline.runtime.levels import LevelsResult
from service.pipeline.runtime.output_kinds import artifact_accuracy
from service.pipeline.advice.stage import Advised
from service.pipeline.verdict.decisions import decisions_table
from service.pipeline.verdict.gates import verdict_from_artifacts
from service.pipeline.verdict.lints import Findings, run_lints
from service.pipeline.verdict.platform_notes import platform_notes
from service.schemas.layers import LayersReport
from service.schemas.levels import DecisionRow, Lint, PlatformNote
from service.schemas.options import ComparisonOptions
from service.schemas.report import Artifact, CpuInfo, PathError, QuantizationInventory, Verdict


@dataclass(frozen=True)
class Decided:
    decisions: list[DecisionRow]
    lints: list[Lint]
    platform: list[PlatformNote]
    artifacts: dict[str, Artifact] = field(default_factory=dict)  # with their levels and final status
    verdict: Verdict | None = None


@dataclass(frozen=True)
class Earlier:
    """Every earlier stage's typed result, as the decide stage reads them (it reads them all: each lint
    may look at any stage). ``layers``: the per-tensor table, when it was computed."""

    prepared: Prepared
    fp32: Fp32
    quantized: Quantized
    inspected: Inspected
    levels: LevelsResult
    layers: LayersReport | None
    advised: Advised


def decide_stage(options: ComparisonOptions, earlier: Earlier, ctx: StageContext) -> Decided:
    """Each artifact with its levels (a file ORT ran at no level is a failed path), the decisions, every
    lint, the platform notes and the gates' verdict."""
    prepared, inspected, levels = earlier.prepared, earlier.inspected, earlier.levels
    artifacts = {name: _with_levels(art, levels.optimized[name]) if name in levels.optimized else art
                 for name, art in inspected.artifacts.items()}
    cpu = cpu_info()
    decided = decided_from_levels(levels, inventories=inspected.inventories, options=options,
                                  batchnorm_in_source=batchnorm_count(prepared.source.program),
                                  advice_measured=earlier.advised.proposed + earlier.advised.refuted, cpu=cpu,
                                  lints=False)
    lints = run_lints(Findings(options=options, levels=levels, inventories=inspected.inventories, cpu=cpu,
                               prepared=prepared, fp32=earlier.fp32, quantized=earlier.quantized,
                               inspected=inspected, artifacts=artifacts, layers=earlier.layers))
    verdict = verdict_from_artifacts(artifacts, options, list(options.gates), samples=prepared.samples.info)
    return Decided(decisions=decided.decisions, lints=lints, platform=decided.platform, artifacts=artifacts,
                   verdict=verdict)


def levels_so_far(options: ComparisonOptions, prepared: Prepared, inspected: Inspected, levels: LevelsResult, *,
                  decisions: bool = False) -> dict:
    """The report's fields a partial levels result holds (the report as it comes, pipeline/sections.py):
    each artifact with the levels done so far and the agreement; with ``decisions``, the decisions table
    (it reads the level graphs only, so it is final once they are made)."""
    fields: dict = {"artifacts": {name: _with_levels(art, levels.optimized[name]) if name in levels.optimized else art
                                  for name, art in inspected.artifacts.items()},
                    "agreement": levels.agreement}
    if decisions:
        fields["decisions"] = decisions_table(names=list(levels.optimized), files=levels.files,
                                              optimized=levels.optimized, inventories=inspected.inventories,
                                              levels=levels.levels, options=options,
                                              batchnorm_in_source=batchnorm_count(prepared.source.program))
    return fields


def decided_from_levels(levels: LevelsResult, *, inventories: dict[str, QuantizationInventory | None],
                        options: ComparisonOptions, batchnorm_in_source: int = 0,
                        cpu: CpuInfo | None = None, advice_measured: list | None = None, lints: bool = True) -> Decided:
    """``advice_measured``: the advice entries (proposed and refuted), whose re-runs the platform
    notes quote (e.g. the coverage this model would have where int8 is allowed). ``lints``: the lints a
    levels result holds alone (the decide stage runs every lint itself, over every stage's results)."""
    cpu = cpu or cpu_info()
    names = list(levels.optimized)
    return Decided(
        decisions=decisions_table(names=names, files=levels.files, optimized=levels.optimized,
                                  inventories=inventories, levels=levels.levels, options=options,
                                  batchnorm_in_source=batchnorm_in_source),
        lints=run_lints(Findings(options=options, levels=levels, inventories=inventories, cpu=cpu)) if lints else [],
        platform=platform_notes(levels.optimized, cpu, advice_measured),
    )


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


def batchnorm_count(program) -> int:
    if program is None:
        return 0
    return sum(1 for n in program.graph.nodes
               if n.op == "call_function" and "batch_norm" in str(getattr(n.target, "__name__", n.target)))
