"""What a comparison asks for and what every stage reads of the job around it.

``ComparisonRequest`` is what a caller (the CLI, a worker) hands the spine; ``StageContext`` is what
the spine hands each stage with it: the job's folders and its progress callback. Both are frozen:
a stage hands what later stages need in its own typed result, never by writing on a shared object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from service.pipeline.cores import CoreShare
from service.schemas.options import ComparisonOptions

Progress = Callable[[str, int, int], None]  # (stage, done, total)


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
    # first phase): None = when the job's share of the machine is two cores (``StageContext.two_threads``).
    parallel_paths: bool | None = None
    # The CLI reads a model where it lies, external data beside it included; a service upload of one
    # .onnx has no folder (its external data comes in an archive).
    data_beside_model: bool = False
    # The PT2E path's time limit when options.pt2e.time_limit_s leaves it open: the service's share
    # of its job time limit (jobs/submission.py), so that the ORT paths' results outlive a slow PT2E.
    pt2e_time_limit_s: float | None = None

    # The most cores the job's untimed work may use, and where that bound comes from (the service's
    # QUANTCOMPARE_JOB_CORES, the CLI's --cores); None: no bound. Within it the job takes the cores no other
    # running job on the machine uses, from the machine's ledger (``cores_ledger``; None: the default folder).
    job_cores: int | None = None
    job_cores_source: str | None = None
    cores_ledger: Path | None = None


@dataclass(frozen=True)
class Folders:
    workdir: Path
    artifacts: Path  # what users keep: the files, the level graphs
    scratch: Path  # pre-processed copies and caches, removed when the comparison ends


@dataclass(frozen=True)
class StageContext:
    request: ComparisonRequest
    folders: Folders
    notify: Progress
    # The job's place in the machine's cores ledger: ``share.now()`` is what a batch of untimed runs may use.
    share: CoreShare = field(default_factory=lambda: CoreShare.fixed(1, "one core"))

    @property
    def cores(self):
        """What gives the job's cores as each batch of untimed runs starts (``parallel_runs.Cores``)."""
        return self.share.now

    def two_threads(self) -> bool:
        """Whether work that times nothing may run on two threads: as ``request.parallel_paths`` says, else
        when the job's share of the machine is two cores or more right now."""
        if self.request.parallel_paths is not None:
            return self.request.parallel_paths
        return self.share.now() >= 2
