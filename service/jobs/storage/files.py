"""Where a job's files live: what the API, the submission and the workers ask of storage.

Two implementations, picked by ``QUANTCOMPARE_STORAGE_URL`` (``storage.open_files``):

- ``folders.DiskFiles`` (default): one folder per job under ``<data_dir>/jobs``; the workers run
  in that folder, so on several machines it must be a shared volume.
- ``bucket.BucketFiles`` (``s3://bucket/prefix``): the same files as objects in an S3-compatible
  bucket. The API stages an upload on its own disk and stores it in the bucket; a worker copies
  the job's inputs into a local scratch folder, runs it there, and stores the artifacts and then
  the report. No directory is shared between machines.

Either way a job's files keep the layout ``service.jobs.spec`` describes (``job.json``, ``input/``,
``artifacts/``, ``report.json.gz``), the report is written last and whole (its presence means
"succeeded"), and identical files of one job are stored once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

from service.jobs.spec import JobSpec
from service.jobs.storage.disk import JobOnDisk
from service.jobs.store import JobRecord

# Names a download may have (the files the core writes). Anything else in a job's artifacts is
# never served: a symlink or an odd name planted by a model's external-data tricks.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")


@dataclass(frozen=True)
class Download:
    """One file to send: a local path, a stream of chunks from storage, or a URL to redirect to."""

    size: int
    path: Path | None = None
    chunks: Iterator[bytes] | None = None
    redirect: str | None = None


class JobFiles(Protocol):
    # True when a job's results must be copied somewhere after it ran (a bucket), False when the
    # job ran where its files live (job folders).
    stores_elsewhere: bool

    def describe(self) -> str: ...
    def check(self) -> None:
        """At start-up: raise ``config.ConfigurationError`` saying what is wrong, or return."""
    def probe(self, timeout_s: float) -> None:
        """Readiness (/readyz): raise when the files cannot be reached now."""
    # -- submission (API) ------------------------------------------------------------------
    def create(self, spec: JobSpec, staged: Path | None) -> None:
        """Store a new job's inputs (``staged``, then removed) and spec, before its row exists."""
    def delete(self, job_id: str) -> None: ...
    # -- running (the pool's supervisor) -----------------------------------------------------
    def checkout(self, rec: JobRecord) -> Path | None:
        """A local folder holding the job's spec and inputs to run it in (a re-run: nothing else);
        None when the job's files are gone."""
    def checkin(self, job_id: str, folder: Path) -> None:
        """A succeeded job's outputs stored from ``folder``, the report last."""
    def discard(self, job_id: str, folder: Path) -> None:
        """The job is over (failed, or checked in): drop what is only local scratch."""
    def store_partial(self, job_id: str, folder: Path) -> None:
        """While the job runs: its partial report (``report.partial.json.gz`` in ``folder``, the sections
        finished so far) where the API reads it, when it changed since the last call."""
    def sweep_scratch(self, *, older_than: float | None = None) -> list[str]:
        """Scratch folders of jobs this machine no longer runs (None: every one; nothing runs yet)."""
    # -- reading (API) ---------------------------------------------------------------------
    def report_version(self, job_id: str, *, partial: bool = False) -> str | None:
        """Changes whenever the stored report does; None when the job has no report (``partial``: the
        report of a running job, the sections finished so far)."""
    def report_bytes(self, job_id: str, *, partial: bool = False) -> bytes:
        """The report's JSON; FileNotFoundError when there is none, OSError when it is damaged."""
    def artifacts(self, job_id: str) -> dict[str, int]:
        """Stored artifact files: name -> bytes."""
    def download(self, job_id: str, name: str, *, filename: str) -> Download | None: ...
    def artifact_for_regeneration(self, job_id: str, artifact: str, scratch: Path) -> Path:
        """``artifacts/<artifact>.onnx`` (and its external data) as a local file."""
    # -- lifecycle -------------------------------------------------------------------------
    def usage(self, statuses: dict[str, tuple[str, float | None]]) -> list[JobOnDisk]:
        """Every stored job with its bytes (the data budget's view)."""
    def sweep_unknown(self, known: set[str], *, older_than: float | None = None) -> list[str]:
        """Remove stored jobs no row owns, last changed before ``older_than``; their ids."""
