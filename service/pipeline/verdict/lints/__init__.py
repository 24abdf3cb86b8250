"""Every lint of the report, one registered function per code (registry.py): on what the uploaded model
is (model.py), and on the quantized files, what a tool wrote, what ORT makes of them and what their
outputs show (artifacts.py). Importing the package registers them all, in the order the report lists
their lints."""

from __future__ import annotations

from service.pipeline.environment import cpu_info
from service.pipeline.runtime.levels import LevelsResult
from service.pipeline.verdict.lints import artifacts, model  # noqa: F401  (they register)
from service.pipeline.verdict.lints.artifacts import repeated_weight_lints
from service.pipeline.verdict.lints.model import (
    fed_back_selection_lints, integer_weight_lints, overridable_initializer_lints, padded_selection_lints,
    symbolic_dim_lints,
)
from service.pipeline.verdict.lints.registry import LINTS, Findings, checked_lints, lint, run_lints, written_elsewhere
from service.schemas.levels import Lint
from service.schemas.options import ComparisonOptions
from service.schemas.report import CpuInfo

__all__ = ["LINTS", "Findings", "checked_lints", "written_elsewhere", "fed_back_selection_lints", "integer_weight_lints", "levels_lints", "lint",
           "overridable_initializer_lints", "padded_selection_lints", "repeated_weight_lints", "run_lints",
           "symbolic_dim_lints"]


def levels_lints(levels: LevelsResult, options: ComparisonOptions, cpu: CpuInfo | None = None,
                 inventories: dict | None = None) -> list[Lint]:
    """The lints a levels result holds alone (scope "levels"): what a test, or a report before the decide
    stage, can say."""
    return run_lints(Findings(options=options, levels=levels, inventories=inventories or {}, cpu=cpu or cpu_info()))


# Lints a later step writes: the emulated targets' (service/pipeline/platforms/targets/lints.py, from the
# platforms' reports, after the decide stage; the spine adds them).
_TARGETS = "service/pipeline/platforms/targets/lints.py"
written_elsewhere("target_compile_failed", "error", "a target (QNN, OpenVINO, another ORT release) refuses a file, "
                  "with its own error and a hint", where=_TARGETS)
written_elsewhere("target_silent_fallback", "error", "a target ran a file on ORT's CPU EP without a word (a backend "
                  "that did not load, dynamic dims)", where=_TARGETS)
written_elsewhere("target_nodes_left", "info", "a target leaves nodes of a file to ORT's CPU EP, with the target's "
                  "reasons", where=_TARGETS)
written_elsewhere("target_fuses_differently", "warning", "another ORT release writes a different graph for a file "
                  "than this machine's ORT", where=_TARGETS)
written_elsewhere("target_level_missing", "info", "an ORT release has no such optimization level (layout came in "
                  "1.23): not run there", where=_TARGETS)
