"""Level graphs a finished job did not keep: listed from report.json, made again on download.

The API process never loads ORT: the graph is made in a subprocess
(``python -m service.pipeline.runtime.level_graphs``), which checks ORT's output against the
digests the job recorded before anything is served (see runtime/level_graphs.py).

Each such process holds a session as large as the job's: ``RegenerationGate`` lets at most
``QUANTCOMPARE_LEVEL_GRAPH_SLOTS`` run at once, queues up to ``QUANTCOMPARE_LEVEL_GRAPH_QUEUE`` more, and
refuses the rest (429 + Retry-After). Downloads of the same file of the same job share one
regeneration (``SharedRegenerations``): 44 clients fetching one graph at once wait for one process,
are all served the same file whole, and take one slot; the file is kept ``MADE_KEPT_S`` after its
last download, in the data directory's tmp/ (so within QUANTCOMPARE_MAX_DATA_GB). The wait is asynchronous (``asyncio`` subprocess): a download
holds no thread of the request pool, so other routes keep answering (44 downloads at once held the
pool's threads for up to 900 s each and started 38 ORT processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

from service.errors import ArtifactGone, Busy, LevelGraphChanged
from service.jobs.storage.files import JobFiles
from service.pipeline.isolation import address_space_limit
from service.jobs.worker import worker_environment

REGENERATE_TIMEOUT_S = 900.0
# A level graph made again stays this long after its last download ends: a CI matrix fetching it
# from several legs a few seconds apart gets one regeneration, and the disk holds it only briefly.
MADE_KEPT_S = 60.0
_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class LevelGraphEntry:
    name: str  # "<artifact>.<level>.onnx"
    artifact: str
    level: str
    graph_sha256: str
    weights_sha256: str | None
    bytes: int  # the self-contained file a download returns
    intra_op_threads: int
    session_config: dict[str, str] = field(default_factory=dict)  # the job's options.ort_session, as the job ran


def level_graph_entries(files: JobFiles, job_id: str) -> dict[str, LevelGraphEntry]:
    """Level graphs of a succeeded job that were not kept as files, by download name."""
    try:
        report = json.loads(files.report_bytes(job_id))
    except OSError:  # no report (the job did not succeed) or a damaged one: nothing to offer
        return {}
    threads = int(((report.get("options") or {}).get("latency") or {}).get("intra_op_threads", 1))
    session_config = dict((report.get("options") or {}).get("ort_session") or {})
    out = {}
    for artifact, art in (report.get("artifacts") or {}).items():
        for level, ol in ((art or {}).get("optimized") or {}).items():
            if not ol or ol.get("file_stored", True) or not ol.get("graph_sha256") or not ol.get("file"):
                continue
            out[ol["file"]] = LevelGraphEntry(
                name=ol["file"], artifact=artifact, level=level, graph_sha256=ol["graph_sha256"],
                weights_sha256=ol.get("weights_sha256"),
                bytes=int(ol.get("download_bytes") or (ol.get("graph_bytes") or 0) + (ol.get("weights_bytes") or 0)),
                intra_op_threads=threads, session_config=session_config)
    return out


class RegenerationGate:
    """At most ``slots`` level graphs made at once, ``queue`` more waiting, Busy (429) past that.

    One per API process (``app.state``); used from its event loop only, so plain counters suffice.
    """

    def __init__(self, slots: int, queue: int):
        self.slots, self.queue = slots, queue
        self._free = asyncio.Semaphore(slots)
        self.running = 0
        self.waiting = 0
        self._mean_s = 10.0  # until one was measured: a small model's graph takes a few seconds

    def retry_after(self) -> int:
        """Seconds until a slot is likely free: the mean regeneration time per queued round."""
        rounds = 1 + self.waiting // max(1, self.slots)
        return max(1, min(600, int(self._mean_s * rounds)))

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.running >= self.slots and self.waiting >= self.queue:
            raise Busy(f"{self.running} level graphs are being made again and {self.waiting} more wait",
                       hint="retry after the time in the Retry-After header (QUANTCOMPARE_LEVEL_GRAPH_SLOTS, "
                            "QUANTCOMPARE_LEVEL_GRAPH_QUEUE)", retry_after=self.retry_after(), status=429)
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        start = time.monotonic()
        try:
            yield
        finally:
            self.running -= 1
            self._free.release()
            self._mean_s = 0.8 * self._mean_s + 0.2 * (time.monotonic() - start)


@dataclass(eq=False)
class _Made:
    task: asyncio.Task
    folder: Path
    users: int = 0  # downloads waiting for the file or sending it
    expiry: asyncio.TimerHandle | None = None


def _made_well(task: asyncio.Task) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None


class SharedRegenerations:
    """One regeneration per (job, file) at a time, whoever asks: later downloads of the same file wait
    for the one running (or take the file it made, for ``keep_s`` after its last download). Distinct
    files still go through ``gate`` (slots, queue, 429). One per API process, used from its event
    loop only. When every download waiting for a regeneration is gone, it is stopped (its process
    group killed), as a lone download's was."""

    def __init__(self, gate: RegenerationGate, tmp_dir: Path, *, keep_s: float = MADE_KEPT_S):
        self.gate, self.tmp_dir, self.keep_s = gate, Path(tmp_dir), keep_s
        self._made: dict[tuple[str, str], _Made] = {}
        self.started = 0  # regenerations begun (tests and diagnostics)

    async def file(self, key: tuple[str, str], make: Callable[[Path], Awaitable[Path]]) -> tuple[Path, Callable[[], None]]:
        """The made file and the release to call once it is sent (or the download failed)."""
        entry = self._made.get(key)
        if entry is None or (entry.task.done() and not _made_well(entry.task)) or (
                _made_well(entry.task) and not entry.task.result().is_file()):
            entry = self._start(key, make)
        entry.users += 1
        if entry.expiry is not None:
            entry.expiry.cancel()
            entry.expiry = None
        release = partial(self._release, key, entry)
        try:
            path = await asyncio.shield(entry.task)
        except BaseException:
            release()
            raise
        return path, release

    def _start(self, key: tuple[str, str], make: Callable[[Path], Awaitable[Path]]) -> _Made:
        folder = self.tmp_dir / f"download-{uuid.uuid4().hex}"

        async def run() -> Path:
            async with self.gate.slot():
                return await make(folder)

        self.started += 1
        entry = _Made(asyncio.ensure_future(run()), folder)
        entry.task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved"
        self._made[key] = entry
        return entry

    def _release(self, key: tuple[str, str], entry: _Made) -> None:
        entry.users -= 1
        if entry.users > 0:
            return
        if not entry.task.done():
            entry.task.cancel()  # nobody waits any more: regenerated_level_graph kills its process
            self._drop(key, entry)
        elif not _made_well(entry.task):
            self._drop(key, entry)
        else:
            entry.expiry = asyncio.get_running_loop().call_later(self.keep_s, self._drop, key, entry)

    def _drop(self, key: tuple[str, str], entry: _Made) -> None:
        if self._made.get(key) is entry:
            del self._made[key]
        if entry.users <= 0:
            shutil.rmtree(entry.folder, ignore_errors=True)

    def clear(self) -> None:
        for key, entry in list(self._made.items()):
            if not entry.task.done():
                entry.task.cancel()
            entry.users = 0
            self._drop(key, entry)


def _gone(entry: LevelGraphEntry) -> ArtifactGone:
    return ArtifactGone(f"{entry.name} cannot be made again: the job's {entry.artifact}.onnx is no longer on disk",
                        hint="the job was evicted or expired (QUANTCOMPARE_MAX_DATA_GB, QUANTCOMPARE_RETENTION_HOURS): "
                             "submit the model again")


async def regenerated_level_graph(files: JobFiles, job_id: str, entry: LevelGraphEntry, scratch: Path, *,
                                  timeout: float = REGENERATE_TIMEOUT_S, memory_mb: int = 0) -> Path:
    """Make the level graph again into ``scratch`` (the caller deletes it). Raises LevelGraphChanged
    when ORT writes another graph, ArtifactGone when the job's artifact is no longer there.

    The artifact it starts from is read where it is stored (from a bucket: into ``scratch`` first).
    ``memory_mb``: RLIMIT_AS of the subprocess (QUANTCOMPARE_WORKER_MEMORY_MB, as for the job itself).
    The subprocess leads its own process group, killed whole past ``timeout`` or when the caller is
    cancelled (the client went away).
    """
    scratch.mkdir(parents=True, exist_ok=True)
    try:  # from a bucket: copied into scratch first, on a thread (the event loop keeps answering)
        model = await asyncio.to_thread(files.artifact_for_regeneration, job_id, entry.artifact, scratch)
    except FileNotFoundError:
        raise _gone(entry) from None
    if not model.is_file():
        raise _gone(entry)
    out = scratch / f"{uuid.uuid4().hex}.onnx"
    env = {**worker_environment(), "PYTHONPATH": str(_ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service.pipeline.runtime.level_graphs", str(model), entry.level,
        str(entry.intra_op_threads), entry.graph_sha256, entry.weights_sha256 or "-", str(out),
        json.dumps(entry.session_config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=str(scratch),
        preexec_fn=address_space_limit(memory_mb), start_new_session=True)
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except BaseException:  # timeout, or the request was cancelled: nothing of it may outlive the download
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    lines = [ln for ln in stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"ok": False, "message": stderr.decode(errors="replace")[-2000:]}
    if not result.get("ok"):
        if result.get("code") == "level_graph_mismatch":
            raise LevelGraphChanged(result["message"],
                                    hint="this server's ONNX Runtime or CPU differs from the one that ran the job: "
                                         "submit the job again to get graphs from this one")
        if not model.is_file():  # removed while ORT read it
            raise _gone(entry)
        raise RuntimeError(f"making {entry.name} again failed: {result.get('message')}")
    return Path(result["path"])
