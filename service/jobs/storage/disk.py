"""What jobs keep on disk, and the data directory's budget (``QUANTCOMPARE_MAX_DATA_GB``).

- A finished job keeps its input, its quantized artifacts and, per level graph, only the digests
  in report.json (the weights are made again on download: service/pipeline/runtime/level_graphs.py).
- Identical files in a job folder are stored once (hard links): the fp32 artifact of an ONNX
  upload is the upload itself. Only whole model files (.onnx, .pt2, .npz) are linked: ONNX's
  external-data loader refuses hard-linked data files.
- The budget is checked when a job is submitted, before it takes a queue slot: finished jobs are
  evicted oldest first until the new job's reservation fits. A reservation is what a job may
  still write: ``RESERVE_FACTOR`` x its input while queued or running (the quantized copies,
  the pre-processed copies in scratch, one level graph's weights at a time), nothing once
  finished. A job that cannot fit even then is refused with 503 + Retry-After before anything of
  it is written; nothing half-written is ever kept.
- Jobs running at once are counted from markers in ``<data_dir>/running`` (one per job, with
  its host and pid): the latency protocol records them.
- A finished job whose file is being downloaded (read, or its level graph made again from its
  artifact) is pinned: a marker in ``<data_dir>/pinned`` (host and pid) for as long as the download
  lasts, and eviction (the budget, the retention) skips it. Pins are taken and evictions decided
  under one file lock, so a job is never pinned after an eviction read the pins and before it
  deleted the folder: the download then finds the job gone and says so (404/410), never a 500.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from service.pipeline.files import file_sha256
from service.pipeline.inputs.sources import is_model_archive

RUNNING_DIR = "running"
PINNED_DIR = "pinned"
# Bytes a job may still write per byte of input while it is queued or running (measured peak of
# a job folder during a job: input + fp32 copy + 3 quantized files + scratch pre-processing copies +
# one level graph's weights = 2.6-3.4x the input on the bench models; rounded up).
RESERVE_FACTOR = 4.0
RESERVE_MIN_BYTES = 64 * 1024 * 1024  # an example job or a tiny upload still writes its artifacts
_LINKABLE = (".onnx", ".pt2", ".npz")
_MIN_LINK_BYTES = 4096


# -- sizes --------------------------------------------------------------------------------
def folder_bytes(folder: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes on disk under ``folder``, each hard-linked file counted once."""
    seen = set() if seen is None else seen
    total = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            total += st.st_size
    return total


# -- identical files once -----------------------------------------------------------------

def dedupe_job_files(job_dir: Path) -> int:
    """Hard-link identical model files of one job folder to one copy; returns the bytes saved."""
    by_size: dict[int, list[Path]] = {}
    for p in sorted(job_dir.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.suffix in _LINKABLE:
            size = p.stat().st_size
            if size >= _MIN_LINK_BYTES:
                by_size.setdefault(size, []).append(p)
    saved = 0
    for size, paths in by_size.items():
        if len(paths) < 2:
            continue
        first_of: dict[str, Path] = {}
        for p in paths:
            digest = file_sha256(p)
            keep = first_of.setdefault(digest, p)
            if keep is p or os.path.samefile(keep, p):
                continue
            tmp = p.with_name(p.name + ".link")
            os.link(keep, tmp)
            os.replace(tmp, p)  # atomic: a reader sees the old copy or the link, never nothing
            saved += size
    return saved


# -- jobs running at once -----------------------------------------------------------------
def _running_dir(job_dir: Path) -> Path:
    return Path(job_dir).resolve().parent.parent / RUNNING_DIR


@contextlib.contextmanager
def running_marker(job_dir: Path) -> Iterator[None]:
    folder = _running_dir(job_dir)
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / Path(job_dir).name
    marker.write_text(f"{socket.gethostname()} {os.getpid()}\n", encoding="utf-8")
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)


def _alive(marker: Path, host: str) -> bool:
    try:
        who, pid = marker.read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return False
    if who != host:
        return True  # another host's worker: trust its marker
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False  # a worker that died under its job left this behind
    except PermissionError:
        return True
    return True


def running_jobs(data_dir: Path) -> int:
    folder = Path(data_dir) / RUNNING_DIR
    if not folder.is_dir():
        return 0
    host = socket.gethostname()
    return sum(1 for m in folder.iterdir() if _alive(m, host))


def running_jobs_probe(job_dir: Path) -> Callable[[], int]:
    data_dir = Path(job_dir).resolve().parent.parent
    return lambda: running_jobs(data_dir)


# -- jobs pinned by a download ------------------------------------------------------------
@contextlib.contextmanager
def eviction_lock(data_dir: Path) -> Iterator[None]:
    """Held while pins are taken and while an eviction reads them and deletes (a file lock: every
    process on the data dir, the API's and its executor's threads alike)."""
    folder = Path(data_dir) / PINNED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def pin(data_dir: Path, job_id: str) -> Path:
    """Pin a job against eviction; returns the marker to hand to ``unpin``."""
    marker = Path(data_dir) / PINNED_DIR / f"{job_id}.{uuid.uuid4().hex}"
    with eviction_lock(data_dir):
        marker.write_text(f"{socket.gethostname()} {os.getpid()}\n", encoding="utf-8")
    return marker


def unpin(marker: Path) -> None:
    marker.unlink(missing_ok=True)


def unpin_job(data_dir: Path, job_id: str) -> None:
    """Drop every pin of a deleted job (a download still sending keeps its open file)."""
    folder = Path(data_dir) / PINNED_DIR
    if folder.is_dir():
        for marker in folder.glob(f"{job_id}.*"):
            marker.unlink(missing_ok=True)


def pinned_jobs(data_dir: Path) -> set[str]:
    """Ids of jobs a live download has pinned (a marker whose process died is removed)."""
    folder = Path(data_dir) / PINNED_DIR
    if not folder.is_dir():
        return set()
    host, out = socket.gethostname(), set()
    for marker in folder.iterdir():
        if marker.name.startswith("."):
            continue
        if _alive(marker, host):
            out.add(marker.name.split(".")[0])
        else:
            marker.unlink(missing_ok=True)
    return out


# -- the data directory's budget ----------------------------------------------------------
@dataclass(frozen=True)
class JobOnDisk:
    id: str
    finished: bool
    finished_at: float | None
    input_bytes: int
    bytes: int

    @property
    def reserved(self) -> int:
        """What this job may still write."""
        if self.finished:
            return 0
        return max(0, reservation_for(self.input_bytes) - self.bytes)


def reservation_for(input_bytes: int) -> int:
    return max(RESERVE_MIN_BYTES, int(RESERVE_FACTOR * input_bytes))


@dataclass(frozen=True)
class BudgetPlan:
    fits: bool
    evict: list[str]  # finished job ids, oldest first
    used: int
    reserved: int
    need: int
    budget: int


def plan_for_new_job(jobs: Iterable[JobOnDisk], *, need: int, budget: int, other_bytes: int = 0,
                     pinned: set[str] = frozenset()) -> BudgetPlan:
    """Which finished jobs to evict (oldest first, never a ``pinned`` one) so that ``need`` more bytes
    fit in ``budget``."""
    jobs = list(jobs)
    used = other_bytes + sum(j.bytes for j in jobs)
    reserved = sum(j.reserved for j in jobs)
    free = budget - used - reserved
    evict: list[str] = []
    for j in sorted((j for j in jobs if j.finished and j.id not in pinned), key=lambda j: (j.finished_at or 0.0, j.id)):
        if free >= need:
            break
        evict.append(j.id)
        free += j.bytes
    return BudgetPlan(fits=free >= need, evict=evict if free >= need else [], used=used, reserved=reserved,
                      need=need, budget=budget)


def jobs_on_disk(jobs_dir: Path, statuses: dict[str, tuple[str, float | None]]) -> list[JobOnDisk]:
    """Every job folder with its bytes; ``statuses``: id -> (status, finished_at) from the store."""
    out = []
    seen: set[tuple[int, int]] = set()
    if not Path(jobs_dir).is_dir():
        return out
    for folder in sorted(Path(jobs_dir).iterdir()):
        if not folder.is_dir():
            continue
        status, finished_at = statuses.get(folder.name, ("unknown", None))
        out.append(JobOnDisk(id=folder.name, finished=status in ("succeeded", "failed"), finished_at=finished_at,
                             input_bytes=folder_bytes(folder / "input", set()), bytes=folder_bytes(folder, seen)))
    return out


def drop_consumed_archive(job_dir: Path, model_file: str | None) -> int:
    """After a job succeeded: an uploaded .zip/.tar was extracted into ``artifacts/fp32.onnx`` + its
    data (a rename), so the archive is a second copy of the model. Returns the bytes freed."""
    if not model_file:
        return 0
    path = Path(job_dir) / model_file
    fp32 = Path(job_dir) / "artifacts" / "fp32.onnx"
    if not path.is_file() or not fp32.is_file():
        return 0
    if not is_model_archive(path):
        return 0
    size = path.stat().st_size
    path.unlink()
    return size
