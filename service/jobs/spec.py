"""The job contract: a plain spec plus a data directory.

Whatever executes a job (the local process pool today, a distributed queue later) gets a
``JobSpec`` (JSON-safe, no paths outside the job folder) and the job's folder, and must leave
``report.json.gz`` and ``artifacts/`` in that folder. Every path in the spec is relative to the
job folder, so the folder can move between machines (a shared volume) unchanged.

Job folder layout::

    <data_dir>/jobs/<id>/
        job.json            this spec
        input/model.onnx    the upload (or model.pt2), input/calibration.npz
        artifacts/          <artifact>.onnx, <artifact>.<level>.onnx  (written by the core)
        report.partial.json.gz  while it runs: the sections finished so far (written atomically, removed at the end)
        report.json.gz      the report (gzip JSON), written last, atomically: its presence means "succeeded"
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SPEC_FILE = "job.json"
REPORT_FILE = "report.json.gz"  # see jobs/storage/report_file.py
PARTIAL_REPORT_FILE = "report.partial.json.gz"  # the sections finished so far, while the job runs
LEGACY_REPORT_FILE = "report.json"  # folders written before the report was compressed
ARTIFACTS_DIR = "artifacts"
INPUT_DIR = "input"


@dataclass(frozen=True)
class JobSpec:
    id: str
    # ComparisonOptions as resolved JSON (defaults filled in), so the cache key and the worker agree.
    options: dict[str, Any] = field(default_factory=dict)
    model_file: str | None = None  # relative to the job folder, e.g. "input/model.onnx"
    example: str | None = None
    calibration_file: str | None = None
    model_name: str | None = None  # display only; never used as a path
    allow_pt2: bool = True  # the server's setting, carried so a remote worker applies the same policy
    # The server's static budgets (dataclasses.asdict of Budgets), carried for the same reason; {} = defaults.
    budgets: dict[str, Any] = field(default_factory=dict)
    # The PT2E path's time limit unless the options set one (the server's share of its job time limit).
    pt2e_time_limit_s: float | None = None
    # The bound on the job's cores and where it comes from, and the machine's cores ledger (None: the
    # default folder): set by the pool that runs the job (its machine's settings), not at submission.
    job_cores: int | None = None
    job_cores_source: str | None = None
    job_cores_ledger: str | None = None
    kind: str = "comparison"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def write(self, job_dir: Path) -> None:
        (job_dir / SPEC_FILE).write_text(self.to_json(), encoding="utf-8")
