"""Where a job's files live (``files.JobFiles``): job folders in the data directory, or a bucket."""

from __future__ import annotations

from service.config import Settings
from service.jobs.storage.bucket import BucketFiles
from service.jobs.storage.files import JobFiles
from service.jobs.storage.folders import DiskFiles


def open_files(settings: Settings) -> JobFiles:
    """``QUANTCOMPARE_STORAGE_URL`` unset: job folders under the data directory; s3://...: a bucket."""
    return BucketFiles(settings) if settings.storage_url else DiskFiles(settings)
