"""What a comparison asks for and what every stage reads of the job around it.

``ComparisonRequest`` is what a caller (the CLI, a worker) hands the spine; ``StageContext`` is what
the spine hands each stage with it: the job's folders and its progress callback. Both are frozen:
a stage hands what later stages need in its own typed result, never by writing on a shared object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from service.pipeline.environment import cores_idle
from service.schemas.options import ComparisonOptions

Progress = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass(frozen=True)
class ComparisonRequest:
    options: ComparisonOptions = field(default_factory=ComparisonOptions)
    model_path: Path | None = None
    example: str | None = None
    calibration_path: Path | None = None
    model_name: str | None = None
    # Quantized files brought beside the model (multipart artifact.<name>, CLI --artifact name=path):
    # name -> file, each reported as artifacts.<name> (quantize/brought.py).
    artifact_paths: dict[str, Path] = field(default_factory=dict)
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

    def two_threads(self, idle: bool | None = None) -> bool:
        """Whether work that times nothing may run on two threads: as ``parallel_paths`` says, else when
        two cores are idle (``idle``, when the caller has just looked)."""
        if self.parallel_paths is not None:
            return self.parallel_paths
        return cores_idle(self.concurrent_jobs) if idle is None else idle
    # The cores the job's untimed accuracy runs use (runtime/parallel_runs.py), and where the figure comes
    # from (the service: QUANTCOMPARE_JOB_CORES or cores / workers); None: every usable core (the CLI).
    job_cores: int | None = None
    job_cores_source: str | None = None


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
    cores: int = 1  # the job's cores for untimed accuracy runs (the spine resolves request.job_cores)
