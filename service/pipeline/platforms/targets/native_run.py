"""A target's script in a child process of this interpreter, with the target's wheels first on its path:
an ORT release must not meet the host's onnxruntime in one process, QNN's libraries print to stdout and load
200+ MB of native code, OpenVINO brings its own threads. Isolated as the emulated platforms are: its own
process group, the worker's RLIMIT_AS (inherited), a wall-clock limit whose expiry kills the group.

A runtime that is not set up, or that dies, refuses the platform with ``platform_unavailable`` and a hint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from service.errors import PlatformUnavailable
from service.pipeline.ort.targets import Platform
from service.pipeline.platforms.runtime import ChildRuntime, answer_from_child
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
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    runtime = ChildRuntime(platform, "the target's process",
                           timeout_hint="ask for fewer artifacts or a smaller model on this target",
                           broken_hint="the target's runtime may be broken: run `make` again")
    out, err = answer_from_child(runtime, [sys.executable, "-s", str(script)], request, env=env, timeout_s=timeout_s,
                                 stdout=subprocess.DEVNULL)
    if out.get("unavailable"):
        raise PlatformUnavailable(f"{platform.name}: {out['unavailable']}"[:1000],
                                  hint="run `make` again (it installs the targets under .venv/targets)",
                                  platform=platform.name)
    return TargetAnswer(answer=out, stderr=err or "")
