"""A real comparison job (``service.jobs.runner.run_comparison_job``) that holds still once its
``level_graphs`` section is written, until the test drops a file named ``go`` in the job folder: the
partial report can then be read while the job is certainly still running."""

from __future__ import annotations

import json
import time
from pathlib import Path

from service.jobs import runner


def run(spec, job_dir: Path, progress) -> None:
    write = runner.write_partial_report

    def write_then_hold(folder, report_json: str):
        path = write(folder, report_json)
        if json.loads(report_json)["sections_done"][-1] == "level_graphs":
            deadline = time.monotonic() + 300
            while not (Path(folder) / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        return path

    runner.write_partial_report = write_then_hold
    try:
        runner.run_comparison_job(spec, job_dir, progress)
    finally:
        runner.write_partial_report = write
