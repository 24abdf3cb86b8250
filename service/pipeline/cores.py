"""The machine's cores, shared by the jobs running on it right now: one ledger per machine.

A job's untimed work (accuracy runs, the per-tensor table, advice's re-quantizations) uses the cores that
no other running job uses: a lone job on an idle 2-core machine gets 2, two jobs get 1 each, and a job
widens again when its neighbour ends. The ledger is a folder on this machine's own disk, never the shared
data dir: a Celery worker on another machine has cores of its own. It holds one file per running job,
named by the job, with the process that runs it; a file whose process is gone is stale and removed (a
worker killed under its job cannot hold cores). Every worker process of the machine, the local pool's
and a Celery worker's alike, reads the same folder.

A job asks for its share (``CoreShare.now``) each time it starts a batch of untimed runs, so the figure
follows the load as the job goes. The figures cannot change what a job computes: every untimed run is a
one-thread session run, bit for bit the same on any number of cores (``runtime/parallel_runs.py``).
``cap`` (``QUANTCOMPARE_JOB_CORES``, the CLI's ``--cores``) is an upper bound, never a promise.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from service.pipeline.environment import usable_cores

__all__ = ["CoreShare", "LedgerEntry", "default_ledger_folder", "job_in_ledger", "ledger_entries"]

LEDGER_ENV = "QUANTCOMPARE_CORES_LEDGER"


def default_ledger_folder() -> Path:
    """This machine's ledger: ``$QUANTCOMPARE_CORES_LEDGER``, else a folder in the machine's temp dir (per
    user, so two users' services on one machine share it only when they ask to)."""
    explicit = os.environ.get(LEDGER_ENV)
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"quantcompare-cores-{os.getuid()}"


@dataclass(frozen=True)
class LedgerEntry:
    name: str  # "<joined at, ns>.<job>": sorted, the order in which the jobs joined
    pid: int
    started: str  # the process's start time (/proc/<pid>/stat field 22): a reused pid is not the same job


def _process_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _alive(entry: LedgerEntry) -> bool:
    try:
        os.kill(entry.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return entry.started in ("?", _process_start(entry.pid))


def ledger_entries(folder: Path) -> list[LedgerEntry]:
    """The jobs running on this machine, in the order they joined; stale entries are removed."""
    out = []
    try:
        names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    except OSError:
        return out
    for name in names:
        try:
            pid, started = (folder / name).read_text(encoding="ascii").split()
            entry = LedgerEntry(name=name, pid=int(pid), started=started)
        except (OSError, ValueError):
            continue  # being written, or just removed
        if _alive(entry):
            out.append(entry)
        else:
            (folder / name).unlink(missing_ok=True)
    return out


class CoreShare:
    """One job's place in the ledger: ``now()`` is the cores it may use at this moment, and every figure
    handed out is kept for the report (``cores_used``, ``why``)."""

    def __init__(self, folder: Path | None, name: str | None, *, cap: int | None = None,
                 cap_source: str | None = None):
        self.folder, self.name = folder, name
        self.cap, self.cap_source = cap, cap_source
        self._lock = threading.Lock()
        self._given: Counter[int] = Counter()
        self._why: dict[int, str] = {}

    @classmethod
    def fixed(cls, cores: int, source: str) -> "CoreShare":
        """A share that is not in any ledger: ``cores`` whatever else runs."""
        return cls(None, None, cap=cores, cap_source=source)

    def _figure(self) -> tuple[int, str]:
        usable = usable_cores()
        if self.folder is None:  # not in a ledger: the cap as given, else every usable core
            return (self.cap, self.cap_source or "the caller") if self.cap else (usable, f"the machine's {usable} usable core(s)")
        entries = [e.name for e in ledger_entries(self.folder)]
        if self.name not in entries:  # removed by hand, or the folder went: count this job all the same
            entries = sorted(entries + [self.name])
        n, rank = len(entries), entries.index(self.name)
        # The remainder goes to the jobs that joined first: 3 cores, 2 jobs -> 2 and 1.
        cores = max(1, usable // n + (1 if rank < usable % n else 0))
        why = (f"the machine's {usable} usable core(s), no other job running on it" if n == 1 else
               f"the machine's {usable} usable core(s) shared by the {n} jobs running on it")
        if self.cap is not None and self.cap < cores:
            cores, why = self.cap, f"{why}, capped by {self.cap_source or 'the caller'}={self.cap}"
        return cores, why

    def now(self) -> int:
        cores, why = self._figure()
        with self._lock:
            self._given[cores] += 1
            self._why.setdefault(cores, why)
        return cores

    def cores_used(self) -> tuple[int, int, int]:
        """(the figure handed out most often, the fewest, the most); before any: what ``now`` would say."""
        with self._lock:
            given = Counter(self._given)
        if not given:
            c = self._figure()[0]
            return c, c, c
        return given.most_common(1)[0][0], min(given), max(given)

    def why(self) -> str:
        most, low, high = self.cores_used()
        with self._lock:
            why = self._why.get(most)
        why = why or self._figure()[1]
        if low != high:
            why += f"; {low} to {high} as other jobs started and ended on the machine"
        return why


@contextmanager
def job_in_ledger(folder: Path | None, job: str | None = None, *, cap: int | None = None,
                  cap_source: str | None = None) -> Iterator[CoreShare]:
    """The job's entry in the machine's ledger while the block runs (``folder`` None: the default one).
    A ledger that cannot be written (a read-only temp dir) leaves the job alone on every usable core
    up to ``cap``, as before the ledger existed."""
    folder = Path(folder) if folder is not None else default_ledger_folder()
    name = f"{time.time_ns():020d}.{job or uuid.uuid4().hex}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}"
        tmp.write_text(f"{os.getpid()} {_process_start(os.getpid())}\n", encoding="ascii")
        tmp.rename(folder / name)  # whole or absent: a reader never sees half an entry
    except OSError:
        yield CoreShare(None, None, cap=cap, cap_source=cap_source or "no cores ledger could be written")
        return
    try:
        yield CoreShare(folder, name, cap=cap, cap_source=cap_source)
    finally:
        (folder / name).unlink(missing_ok=True)
