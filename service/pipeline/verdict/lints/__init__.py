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
from service.pipeline.verdict.lints.registry import LINTS, Findings, lint, run_lints
from service.schemas.levels import Lint
from service.schemas.options import ComparisonOptions
from service.schemas.report import CpuInfo

__all__ = ["LINTS", "Findings", "fed_back_selection_lints", "integer_weight_lints", "levels_lints", "lint",
           "overridable_initializer_lints", "padded_selection_lints", "repeated_weight_lints", "run_lints",
           "symbolic_dim_lints"]


def levels_lints(levels: LevelsResult, options: ComparisonOptions, cpu: CpuInfo | None = None,
                 inventories: dict | None = None) -> list[Lint]:
    """The lints a levels result holds alone (scope "levels"): what a test, or a report before the decide
    stage, can say."""
    return run_lints(Findings(options=options, levels=levels, inventories=inventories or {}, cpu=cpu or cpu_info()))
