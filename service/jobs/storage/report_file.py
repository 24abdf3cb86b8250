"""A finished job's report on disk: gzip-compressed JSON, written last and atomically.

The report is the largest file of a small model's job: per level and artifact it lists every node
ORT runs, and per artifact every scale and zero point (7 MB for PP-OCRv4's 4.7 MB detector, 1.7x
the input plus its quantized files on disk). It compresses about 9x, so it is stored as
``report.json.gz``; its presence still means "succeeded". A folder written before that (a plain
``report.json``) is read as it is.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from service.jobs.spec import LEGACY_REPORT_FILE, PARTIAL_REPORT_FILE, REPORT_FILE

__all__ = ["write_report", "write_partial_report", "stored_report", "stored_partial_report", "read_report_bytes",
           "report_json", "has_report", "remove_report"]


def _write_atomically(path: Path, report_json: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    # mtime=0: the same report gives the same bytes (the digest of a stored result is stable).
    tmp.write_bytes(gzip.compress(report_json.encode("utf-8"), compresslevel=6, mtime=0))
    os.replace(tmp, path)
    return path


def write_report(job_dir: Path, report_json: str) -> Path:
    """``report_json`` compressed into the job folder, atomically (a reader never sees half of it)."""
    path = _write_atomically(Path(job_dir) / REPORT_FILE, report_json)
    (Path(job_dir) / LEGACY_REPORT_FILE).unlink(missing_ok=True)
    (Path(job_dir) / PARTIAL_REPORT_FILE).unlink(missing_ok=True)
    return path


def write_partial_report(job_dir: Path, report_json: str) -> Path:
    """The sections a running job has finished (``Report.partial``), replacing the last ones atomically:
    the API serves it while the job runs, from whichever machine ran the job (a shared data dir)."""
    return _write_atomically(Path(job_dir) / PARTIAL_REPORT_FILE, report_json)


def stored_partial_report(job_dir: Path) -> Path | None:
    path = Path(job_dir) / PARTIAL_REPORT_FILE
    return path if path.is_file() else None


def stored_report(job_dir: Path) -> Path | None:
    """The report file of a succeeded job (compressed, or a plain one from before), else None."""
    for name in (REPORT_FILE, LEGACY_REPORT_FILE):
        path = Path(job_dir) / name
        if path.is_file():
            return path
    return None


def read_report_bytes(job_dir: Path, *, partial: bool = False) -> bytes:
    """The report's JSON bytes (``partial``: the sections a running job has finished). ``FileNotFoundError``
    when the job has none, ``OSError`` when it is damaged."""
    path = stored_partial_report(job_dir) if partial else stored_report(job_dir)
    if path is None:
        raise FileNotFoundError(Path(job_dir) / REPORT_FILE)
    return report_json(path.name, path.read_bytes(), where=str(path))


def report_json(name: str, raw: bytes, *, where: str) -> bytes:
    """The JSON of a stored report file ``name`` (compressed, the partial one too, or a plain one from before)."""
    if name == LEGACY_REPORT_FILE:
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, zlib.error) as e:  # truncated or damaged: callers treat an OSError as "no report"
        raise OSError(f"the stored report {where} is damaged: {e}") from e


def has_report(job_dir: Path) -> bool:
    return stored_report(job_dir) is not None


def remove_report(job_dir: Path) -> None:
    for name in (REPORT_FILE, LEGACY_REPORT_FILE, PARTIAL_REPORT_FILE):
        (Path(job_dir) / name).unlink(missing_ok=True)
