"""The files of a job a user can download, and the names they are served under.

Read by the artifacts route and by the report page's route (its downloads list): neither owns these
rules, the job's storage does (``files.JobFiles``: job folders or a bucket; an artifact's name ->
(artifact, level) is ``pipeline.files.split_name``).
"""

from __future__ import annotations

from service.jobs.storage.files import JobFiles
from service.jobs.storage.level_downloads import level_graph_entries


def downloadable_files(files: JobFiles, job_id: str) -> list[tuple[str, int]]:
    """(name, size) of every file a user can download: the stored ones, and the level graphs the
    job kept as digests only (made again on download; size = the file that will be served)."""
    out = files.artifacts(job_id)
    for entry in level_graph_entries(files, job_id).values():
        out.setdefault(entry.name, entry.bytes)
    return sorted(out.items())


def download_name(model_name: str | None, job_id: str, name: str) -> str:
    return f"{model_name or 'model'}-{job_id[:8]}.{name}"
