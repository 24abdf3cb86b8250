"""The lint registry: every lint code the report can carry, one function each, registered with its code,
severity and one-line meaning. ``run_lints`` (the decide stage's one call) runs them all over the earlier
stages' typed results.

A code is a contract: CI jobs filter on it. A new lint is one function here or in a family module
(``@lint("code", "warning", "what it says")``) and one line in docs/lints.md; the suite checks that
every code the code base writes is registered with the severities it writes, and that the docs list
exactly the registry. ``run_lints`` logs any lint that slipped past both.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Literal

from service.pipeline.environment import cpu_info
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.stage import Inspected
from service.pipeline.quantize.stage import Quantized
from service.pipeline.runtime.levels import FileFacts, LevelsResult
from service.schemas.layers import LayersReport
from service.schemas.levels import Lint, OptimizedLevel
from service.schemas.options import ComparisonOptions
from service.schemas.report import Artifact, CpuInfo, QuantizationInventory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Findings:
    """What the lints read: the earlier stages' typed results. ``levels``, ``options``, ``inventories`` and
    ``cpu`` are always there; the rest only in the decide stage (``whole``): a lint that reads them is
    registered with ``scope="job"`` and is not run over levels alone (a partial report, a test)."""

    options: ComparisonOptions
    levels: LevelsResult
    inventories: dict[str, QuantizationInventory | None] = field(default_factory=dict)
    cpu: CpuInfo = field(default_factory=cpu_info)
    prepared: Prepared | None = None
    fp32: Fp32 | None = None
    quantized: Quantized | None = None
    inspected: Inspected | None = None
    artifacts: dict[str, Artifact] = field(default_factory=dict)  # with their levels and final status
    layers: LayersReport | None = None

    @property
    def whole(self) -> bool:
        return self.prepared is not None

    def quantized_files(self) -> list[tuple[str, FileFacts, dict[str, OptimizedLevel]]]:
        """(artifact, what its file holds, its levels) for each quantized file ORT ran, in the levels' order."""
        return [(name, self.levels.files[name], self.levels.optimized.get(name, {}))
                for name in self.levels.optimized if name != "fp32"]


Scope = Literal["levels", "job", "elsewhere"]


@dataclass(frozen=True)
class LintKind:
    code: str
    severities: tuple[str, ...]  # the first is the usual one; others depend on what was found
    summary: str
    scope: Scope
    find: Callable[[Findings], list[Lint]]


LINTS: dict[str, LintKind] = {}  # in the order the report lists their lints


def lint(code: str, severity: str, meaning: str, *, scope: Scope = "levels",
         reads: Callable[[Findings], tuple] | None = None):
    """Register the decorated function as the one function of ``code``: ``find(findings) -> list[Lint]``,
    or, with ``reads``, ``find(*reads(findings))`` (a function of plain values a test can call alone).
    ``severity``: "warning", or "error,warning" when it depends on what was found (the first the usual).
    ``scope``: "levels" when it reads only ``levels``, ``options``, ``inventories`` and ``cpu``; "job"
    when it reads the other stages' results too."""

    def register(fn: Callable[..., list[Lint]]) -> Callable[..., list[Lint]]:
        if code in LINTS:
            raise ValueError(f"lint {code!r} is registered twice ({LINTS[code].find.__module__}, {fn.__module__})")
        find = fn if reads is None else _reading(fn, reads)
        LINTS[code] = LintKind(code, tuple(s.strip() for s in severity.split(",")), meaning, scope, find)
        return fn

    return register


def _reading(fn: Callable[..., list[Lint]], reads: Callable[[Findings], tuple]) -> Callable[[Findings], list[Lint]]:
    def find(found: Findings) -> list[Lint]:
        return fn(*reads(found))

    find.__module__, find.__qualname__ = fn.__module__, fn.__qualname__
    return find


def written_elsewhere(code: str, severity: str, meaning: str, *, where: str) -> None:
    """Register a code whose lints a later step writes (``where``: the emulated targets' lints, made after the
    decide stage from the platforms' reports): in the registry and the docs like the others, not run here."""
    if code in LINTS:
        raise ValueError(f"lint {code!r} is registered twice")
    LINTS[code] = LintKind(code, tuple(s.strip() for s in severity.split(",")), meaning, "elsewhere",
                           lambda found: [])
    _ELSEWHERE[code] = where


_ELSEWHERE: dict[str, str] = {}


def run_lints(found: Findings) -> list[Lint]:
    """Every registered lint over ``found`` (those of scope "job" only when it is whole). One not
    registered as written is logged, never dropped: a report is worth more with an undocumented lint
    than without its finding."""
    return checked_lints([x for kind in LINTS.values() if kind.scope == "levels" or (found.whole and kind.scope == "job")
                          for x in kind.find(found)])


def checked_lints(lints: list[Lint]) -> list[Lint]:
    """``lints`` as they go into the report; one not registered as written is logged, never dropped."""
    for x in lints:
        kind = LINTS.get(x.code)
        if kind is None or x.severity not in kind.severities:
            log.error("lint %r (%s) is not registered as such (service/pipeline/verdict/lints/)", x.code, x.severity)
    return lints


def first_three(shown: list[str]) -> str:
    return ", ".join(shown[:3]) + (" ..." if len(shown) > 3 else "")


def size_text(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def db_text(v: float | None) -> str:
    return "exact" if v is None else f"{v:.1f} dB"
