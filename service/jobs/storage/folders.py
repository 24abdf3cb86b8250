"""Job files in one folder per job under ``<data_dir>/jobs`` (the default storage).

The API writes the folder, a worker runs the job inside it, and the API serves from it: with
workers on other machines the data directory is a volume every machine mounts at the same path.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from service.config import Settings
from service.jobs.spec import ARTIFACTS_DIR, JobSpec
from service.jobs.storage.disk import JobOnDisk, jobs_on_disk
from service.jobs.storage.files import SAFE_NAME, Download
from service.jobs.storage.report_file import read_report_bytes, remove_report, stored_partial_report, stored_report
from service.jobs.store import JobRecord


class DiskFiles:
    stores_elsewhere = False

    def __init__(self, settings: Settings):
        self.jobs_dir = settings.jobs_dir

    def describe(self) -> str:
        return f"job folders in {self.jobs_dir}"

    def check(self) -> None:
        self.jobs_dir.mkdir(parents=True, exist_ok=True)

    def probe(self, timeout_s: float) -> None:  # noqa: ARG002 - a local folder answers at once
        """Readiness: the jobs folder is there and writable (a shared volume that went away is not)."""
        if not (self.jobs_dir.is_dir() and os.access(self.jobs_dir, os.W_OK | os.X_OK)):
            raise OSError(f"{self.jobs_dir} is missing or not writable")

    def folder(self, job_id: str) -> Path:
        return self.jobs_dir / job_id

    # -- submission ------------------------------------------------------------------------
    def create(self, spec: JobSpec, staged: Path | None) -> None:
        folder = self.folder(spec.id)
        if staged is not None:
            os.replace(staged, folder)  # same filesystem: atomic, no copy
        else:
            folder.mkdir(parents=True)
        spec.write(folder)

    def delete(self, job_id: str) -> None:
        shutil.rmtree(self.folder(job_id), ignore_errors=True)

    # -- running ---------------------------------------------------------------------------
    def checkout(self, rec: JobRecord) -> Path | None:
        folder = self.folder(rec.id)
        if not folder.is_dir():
            return None
        if rec.attempts > 1:  # a re-run after a restart starts from its inputs only
            shutil.rmtree(folder / ARTIFACTS_DIR, ignore_errors=True)
            remove_report(folder)
        return folder

    def checkin(self, job_id: str, folder: Path) -> None:
        pass  # the job ran where its files live

    def discard(self, job_id: str, folder: Path) -> None:
        pass

    def sweep_scratch(self, *, older_than: float | None = None) -> list[str]:
        return []  # the job folders are the storage itself: sweep_unknown decides what goes

    # -- reading ---------------------------------------------------------------------------
    def store_partial(self, job_id: str, folder: Path) -> None:
        pass  # the job runs in its own folder: the partial report is where the API reads it

    def report_version(self, job_id: str, *, partial: bool = False) -> str | None:
        folder = self.folder(job_id)
        path = stored_partial_report(folder) if partial else stored_report(folder)
        try:
            return f"{path.name}:{path.stat().st_mtime_ns}" if path is not None else None
        except OSError:
            return None

    def report_bytes(self, job_id: str, *, partial: bool = False) -> bytes:
        return read_report_bytes(self.folder(job_id), partial=partial)

    def _artifact_paths(self, job_id: str) -> list[Path]:
        folder = self.folder(job_id) / ARTIFACTS_DIR
        if not folder.is_dir():
            return []
        # Regular files only: a symlink planted by a model's external-data tricks is never served.
        return sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and SAFE_NAME.fullmatch(p.name))

    def artifacts(self, job_id: str) -> dict[str, int]:
        return {p.name: p.stat().st_size for p in self._artifact_paths(job_id)}

    def download(self, job_id: str, name: str, *, filename: str) -> Download | None:
        path = next((p for p in self._artifact_paths(job_id) if p.name == name), None)
        return Download(size=path.stat().st_size, path=path) if path is not None else None

    def artifact_for_regeneration(self, job_id: str, artifact: str, scratch: Path) -> Path:
        return self.folder(job_id) / ARTIFACTS_DIR / f"{artifact}.onnx"

    # -- lifecycle -------------------------------------------------------------------------
    def usage(self, statuses: dict[str, tuple[str, float | None]]) -> list[JobOnDisk]:
        return jobs_on_disk(self.jobs_dir, statuses)

    def sweep_unknown(self, known: set[str], *, older_than: float | None = None) -> list[str]:
        swept = []
        for entry in self.jobs_dir.iterdir():
            if entry.name in known or (older_than is not None and last_changed(entry) >= older_than):
                continue
            swept.append(entry.name)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        return swept


def last_changed(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0
