"""Job records -> the job envelope, with the report read from the job's storage."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from datetime import datetime, timezone

from pydantic import ValidationError

from service.jobs.storage.files import JobFiles
from service.jobs.store import JobRecord
from service.schemas.api import Job, JobLinks, Problem, Progress
from service.schemas.report import Report

log = logging.getLogger("quantcompare.api")


def _ts(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=timezone.utc) if value is not None else None


def links(job_id: str) -> JobLinks:
    base = f"/v1/comparisons/{job_id}"
    return JobLinks(self=base, report_html=f"{base}/report.html", artifacts=f"{base}/artifacts")


class ReportCache:
    """Parsed reports by (job, version of the stored report): polling clients do not re-parse the same file."""

    def __init__(self, size: int = 32):
        self._items: OrderedDict[tuple[str, str], Report] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def load(self, files: JobFiles, job_id: str, *, partial: bool = False) -> Report | None:
        """The job's report; ``partial``: the sections a running job has finished so far."""
        version = files.report_version(job_id, partial=partial)
        if version is None:
            return None
        key = (job_id, version)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        try:
            report = Report.model_validate_json(files.report_bytes(job_id, partial=partial))
        except (OSError, ValidationError, ValueError):
            # A report written by an older schema: treat as absent rather than fail the request.
            log.warning("report of %s does not load with this version's schema", job_id, exc_info=True)
            return None
        with self._lock:
            self._items[key] = report
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return report


def envelope(rec: JobRecord, files: JobFiles, reports: ReportCache, *, cached: bool = False) -> Job:
    # A running job carries the sections it has finished (Report.partial); a finished one its report.
    report = (reports.load(files, rec.id) if rec.status == "succeeded"
              else reports.load(files, rec.id, partial=True) if rec.status == "running" else None)
    return Job(
        id=rec.id, status=rec.status, cached=cached,
        created_at=_ts(rec.created_at), started_at=_ts(rec.started_at), finished_at=_ts(rec.finished_at),
        progress=Progress(stage=rec.stage, done=rec.done, total=rec.total),
        error=Problem(**rec.error) if rec.error else None,
        report=report, links=links(rec.id),
    )
