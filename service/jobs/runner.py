"""What a worker runs for a comparison job: the core, then the report written atomically.

This is the whole job contract for any executor: ``run_comparison_job(spec, job_dir, progress)``
with the job folder as the current directory. The presence of the report (``report.json.gz``,
``jobs/storage/report_file.py``) means success. While the job runs, each section the core finishes
is written to ``report.partial.json.gz`` (atomically, in the job folder, so the API serves it whichever
executor ran the job: the local pool or a Celery worker on a shared data dir).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from service.jobs.storage.disk import dedupe_job_files, drop_consumed_archive, running_jobs_probe, running_marker
from service.jobs.spec import JobSpec
from service.jobs.storage.report_file import write_partial_report, write_report
from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.inputs.safety import Budgets
from service.schemas.options import ComparisonOptions


def run_comparison_job(spec: JobSpec, job_dir: Path, progress: Callable[[str, int, int], None]) -> None:
    # Imported here, not at module top: the API process imports this module's neighbours, never torch.

    request = ComparisonRequest(
        options=ComparisonOptions.model_validate(spec.options),
        model_path=(job_dir / spec.model_file) if spec.model_file else None,
        example=spec.example,
        calibration_path=(job_dir / spec.calibration_file) if spec.calibration_file else None,
        model_name=spec.model_name,
        allow_pt2=spec.allow_pt2,
        budgets=Budgets(**spec.budgets) if spec.budgets else None,  # the server's QUANTCOMPARE_BUDGET_* settings
        keep_level_graphs=False,  # level graphs are made again on download (service/jobs/storage/level_downloads.py)
        concurrent_jobs=running_jobs_probe(job_dir),
        pt2e_time_limit_s=spec.pt2e_time_limit_s,
        job_cores=spec.job_cores, job_cores_source=spec.job_cores_source,
        cores_ledger=Path(spec.job_cores_ledger) if spec.job_cores_ledger else None,
    )

    def on_section(name: str, report) -> None:
        write_partial_report(job_dir, report.model_dump_json())

    with running_marker(job_dir):
        report = run_comparison(request, job_dir, progress=progress, report_id=spec.id, on_section=on_section)
        dedupe_job_files(job_dir)
    write_report(job_dir, report.model_dump_json())
    # Only once the result is complete: a job interrupted before this line runs again from its input.
    drop_consumed_archive(job_dir, spec.model_file)
