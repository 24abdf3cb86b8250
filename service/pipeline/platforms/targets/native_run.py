"""A target's script in a child process of this interpreter, with the target's wheels first on its path:
an ORT release must not meet the host's onnxruntime in one process, QNN's libraries print to stdout and load
200+ MB of native code, OpenVINO brings its own threads. Isolated as the emulated platforms are: its own
process group, the worker's RLIMIT_AS (inherited), a wall-clock limit whose expiry kills the group.

A runtime that is not set up, or that dies, refuses the platform with ``platform_unavailable`` and a hint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from service.errors import PlatformUnavailable
from service.pipeline.ort.targets import Platform
from service.pipeline.platforms.targets.install import site_for

__all__ = ["TargetAnswer", "target_run"]


@dataclass(frozen=True)
class TargetAnswer:
    answer: dict
    stderr: str  # the runtime's own log lines (QNN's "Unable to load backend" is only said there)


def target_run(platform: Platform, script: Path, request: dict, *, timeout_s: float,
               root: Path | None = None) -> TargetAnswer:
    """Run ``script`` on ``request`` with ``platform``'s runtime; its answer and what it logged."""
    site = site_for(platform, root)
    with tempfile.TemporaryDirectory(prefix="qc-target-") as tmp:
        req_path, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        req_path.write_text(json.dumps({**request, "answer": str(answer)}))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": tmp}
        proc = subprocess.Popen([sys.executable, "-s", str(script), str(req_path)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=tmp, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise PlatformUnavailable(f"{platform.name}: ran past {timeout_s:.0f} s",
                                      hint="ask for fewer artifacts or a smaller model on this target",
                                      platform=platform.name) from None
        if proc.returncode != 0 or not answer.exists():
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            tail = [ln for ln in (err or "").strip().splitlines() if ln.strip()][-1:] or [""]
            raise PlatformUnavailable(f"{platform.name}: the target's process failed ({how}) {tail[0][:300]}".rstrip(),
                                      hint="the target's runtime may be broken: run `make` again",
                                      platform=platform.name)
        out = json.loads(answer.read_text())
    if out.get("unavailable"):
        raise PlatformUnavailable(f"{platform.name}: {out['unavailable']}"[:1000],
                                  hint="run `make` again (it installs the targets under .venv/targets)",
                                  platform=platform.name)
    return TargetAnswer(answer=out, stderr=err or "")
