"""Level graphs a finished job did not keep: listed from report.json, made again on download.

The API process never loads ORT: the graph is made in a subprocess
(``python -m service.pipeline.runtime.level_graphs``), which checks ORT's output against the
digests the job recorded before anything is served (see runtime/level_graphs.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from service.errors import LevelGraphChanged
from service.pipeline.isolation import address_space_limit
from service.jobs.spec import ARTIFACTS_DIR
from service.jobs.storage.report_file import read_report_bytes
from service.jobs.worker import worker_environment

REGENERATE_TIMEOUT_S = 900.0
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


def level_graph_entries(job_dir: Path) -> dict[str, LevelGraphEntry]:
    """Level graphs of a succeeded job that were not kept as files, by download name."""
    try:
        report = json.loads(read_report_bytes(Path(job_dir)))
    except OSError:  # no report (the job did not succeed) or a damaged one: nothing to offer
        return {}
    threads = int(((report.get("options") or {}).get("latency") or {}).get("intra_op_threads", 1))
    out = {}
    for artifact, art in (report.get("artifacts") or {}).items():
        for level, ol in ((art or {}).get("optimized") or {}).items():
            if not ol or ol.get("file_stored", True) or not ol.get("graph_sha256") or not ol.get("file"):
                continue
            out[ol["file"]] = LevelGraphEntry(
                name=ol["file"], artifact=artifact, level=level, graph_sha256=ol["graph_sha256"],
                weights_sha256=ol.get("weights_sha256"),
                bytes=int(ol.get("download_bytes") or (ol.get("graph_bytes") or 0) + (ol.get("weights_bytes") or 0)),
                intra_op_threads=threads)
    return out


def regenerated_level_graph(job_dir: Path, entry: LevelGraphEntry, scratch: Path, *,
                            timeout: float = REGENERATE_TIMEOUT_S, memory_mb: int = 0) -> Path:
    """Make the level graph again into ``scratch`` (the caller deletes it); raises LevelGraphChanged.

    ``memory_mb``: RLIMIT_AS of the subprocess (QUANTCOMPARE_WORKER_MEMORY_MB, as for the job itself).
    """
    model = Path(job_dir) / ARTIFACTS_DIR / f"{entry.artifact}.onnx"
    scratch.mkdir(parents=True, exist_ok=True)
    out = scratch / f"{uuid.uuid4().hex}.onnx"
    env = {**worker_environment(), "PYTHONPATH": str(_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "service.pipeline.runtime.level_graphs", str(model), entry.level,
         str(entry.intra_op_threads), entry.graph_sha256, entry.weights_sha256 or "-", str(out)],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=str(scratch), preexec_fn=address_space_limit(memory_mb))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"ok": False, "message": proc.stderr[-2000:]}
    if not result.get("ok"):
        if result.get("code") == "level_graph_mismatch":
            raise LevelGraphChanged(result["message"],
                                    hint="this server's ONNX Runtime or CPU differs from the one that ran the job: "
                                         "submit the job again to get graphs from this one")
        raise RuntimeError(f"making {entry.name} again failed: {result.get('message')}")
    return Path(result["path"])
