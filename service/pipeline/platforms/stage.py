"""The platforms stage: after this machine's levels, each emulated platform the options name gets its
own level graphs, blockers, decisions and accuracy, and the rows that set it beside this machine. A target
(``ort:<version>``, ``qnn[:<soc>]``, ``openvino:cpu``) gets the same, or, where the target compiles the file
itself, what it took and left, its accuracy and (natively) its latency per artifact."""

from __future__ import annotations

import logging
from dataclasses import replace
from importlib.metadata import version

from service.errors import PlatformUnavailable
from service.pipeline.context import StageContext
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.platforms.advice import advice_for_platform
from service.pipeline.platforms.targets.compiled import compiled_target_report
from service.pipeline.platforms.targets.ort_release import release_summary
from service.pipeline.platforms.targets.rows import release_rows, target_rows
from service.pipeline.platforms.emulated_levels import platform_levels, unavailable_report
from service.pipeline.platforms.side_by_side import side_by_side_rows
from service.pipeline.ort.targets import host_platform, int8_allowed_in, platform_from_name
from service.pipeline.runtime.levels import LevelsResult
from service.pipeline.runtime.stage import levels_input
from service.pipeline.verdict.decide import batchnorm_count
from service.pipeline.verdict.decisions import decisions_table
from service.schemas.options import ComparisonOptions
from service.schemas.platforms import PlatformReport

__all__ = ["emulated_platforms", "platforms_stage"]

log = logging.getLogger(__name__)


def emulated_platforms(options: ComparisonOptions) -> list[str]:
    """The names in ``options.platforms`` that this stage runs (the host's own results are the levels stage's)."""
    return [name for name in options.platforms or [] if platform_from_name(name).kind != "host"]


def platforms_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, inspected: Inspected,
                    levels: LevelsResult, ctx: StageContext) -> dict[str, PlatformReport]:
    """``{name: PlatformReport}`` for every emulated platform in ``options.platforms`` (this machine's
    own results stay in ``artifacts``); a runtime that is unavailable, or whose answer cannot be read, is a
    report with status ``unavailable``: the job's other platforms and this machine's results stand."""
    host = host_platform()
    out: dict[str, PlatformReport] = {}
    out_dir, inventories = ctx.folders.artifacts, inspected.inventories
    # What this machine's levels compared, less any file they did not reach.
    compared = levels_input(options, prepared, fp32, inspected)
    compared = replace(compared, artifact_paths={n: p for n, p in compared.artifact_paths.items()
                                                 if n in levels.optimized})
    for name in emulated_platforms(options):
        platform = platform_from_name(name)
        if platform.kind == "ort":  # it runs with the job's options.ort_session (emulated_levels._levels_request)
            platform = replace(platform, int8_allowed=int8_allowed_in(options.ort_session, platform.int8_allowed))
        try:
            if platform.kind in ("qnn", "openvino"):
                report = compiled_target_report(platform, compared, out_dir)
                out[name] = report.model_copy(update={"side_by_side": target_rows(levels.optimized, report)})
                continue
            report = platform_levels(platform, compared, levels, out_dir)
        except Exception as e:  # noqa: BLE001 - one platform's failure must not fail the comparison
            log.warning("platform %s failed", name, exc_info=True)
            report = unavailable_report(platform, PlatformUnavailable(
                f"{name}: what the emulated ONNX Runtime wrote could not be read: {type(e).__name__}: {e}"[:1000],
                hint="the server log has the details; the other platforms' results stand", platform=name))
        if report.status == "ok":
            report = report.model_copy(update={
                "decisions": decisions_table(names=list(report.optimized), files=levels.files,
                                             optimized=report.optimized, inventories=inventories,
                                             levels=levels.levels, options=options,
                                             batchnorm_in_source=batchnorm_count(prepared.source.program)),
                "side_by_side": side_by_side_rows(levels.optimized, host, report, options.ort_session)})
            if platform.kind == "ort":
                report = release_summary(report)
                report = report.model_copy(update={"side_by_side": release_rows(
                    levels.optimized, report.side_by_side, report, version("onnxruntime"))})
            report = report.model_copy(update={"advice": advice_for_platform(report)})
        out[name] = report
    return out
