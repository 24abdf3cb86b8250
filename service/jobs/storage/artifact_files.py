"""The files of a job a user can download, and the names they are served under.

Read by the artifacts route and by the report page's route (its downloads list): neither owns these
rules, the job folder's layout does (an artifact's name -> (artifact, level) is ``pipeline.files.split_name``).
"""

from __future__ import annotations

import re
from pathlib import Path

from service.jobs.spec import ARTIFACTS_DIR
from service.jobs.storage.level_downloads import level_graph_entries

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")


def artifact_files(job_dir: Path) -> list[Path]:
    folder = job_dir / ARTIFACTS_DIR
    if not folder.is_dir():
        return []
    # Regular files only: a symlink planted by a model's external-data tricks is never served.
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and _NAME.fullmatch(p.name))


def downloadable_files(job_dir: Path) -> list[tuple[str, int]]:
    """(name, size) of every file a user can download: the stored ones, and the level graphs the
    job kept as digests only (made again on download; size = the file that will be served)."""
    out = {p.name: p.stat().st_size for p in artifact_files(job_dir)}
    for entry in level_graph_entries(job_dir).values():
        out.setdefault(entry.name, entry.bytes)
    return sorted(out.items())


def download_name(model_name: str | None, job_id: str, name: str) -> str:
    return f"{model_name or 'model'}-{job_id[:8]}.{name}"
