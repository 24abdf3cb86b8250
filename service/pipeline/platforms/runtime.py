"""The emulated ORT as a separate process: qemu-user running the sysroot's python3.11 on
``emulated_ort.py``, isolated as the worker is: its own process group, the worker's RLIMIT_AS (a child
inherits it), and a wall-clock limit whose expiry kills the group.

A runtime that is not set up, or that cannot run, refuses the platform with
``platform_unavailable`` and a hint; the caller keeps the job's other platforms.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from service.errors import PlatformUnavailable
from service.pipeline.platforms.sysroot import QEMU, cpu_root, default_root, ready_file
from service.pipeline.ort.targets import Platform

__all__ = ["EMULATED_SCRIPT", "emulated_command", "emulated_run", "runtime_for"]

EMULATED_SCRIPT = Path(__file__).with_name("emulated_ort.py")
SETUP_HINT = "run `make` (it sets up the arm64 runtime under .venv/arm64), or set QUANTCOMPARE_ARM64_ROOT to one"


def runtime_for(platform: Platform, root: Path | None = None) -> Path:
    """The sysroot view of ``platform``'s CPU; PlatformUnavailable when it is not set up."""
    root = Path(root) if root is not None else default_root()
    if shutil.which(QEMU) is None:
        raise PlatformUnavailable(f"{platform.name}: {QEMU} is not installed, so ONNX Runtime cannot be emulated",
                                  hint=SETUP_HINT, platform=platform.name)
    view = cpu_root(root, platform.qemu_cpu or "")
    if not ready_file(root).exists() or not (view / "proc" / "cpuinfo").exists() \
            or not (view / "usr" / "bin" / "python3.11").exists():
        raise PlatformUnavailable(f"{platform.name}: the arm64 runtime is not set up on this server",
                                  hint=SETUP_HINT, platform=platform.name)
    return view


def emulated_command(view: Path, script: Path, *args: str) -> list[str]:
    return [QEMU, "-L", str(view), str(view / "usr" / "bin" / "python3.11"), str(script), *args]


def emulated_run(platform: Platform, request: dict, *, timeout_s: float, root: Path | None = None) -> dict:
    """Run ``emulated_ort.py`` on ``request`` under ``platform``'s emulated CPU; its answer.

    Raises PlatformUnavailable when the runtime is missing, dies of a signal, exits non-zero or
    runs past ``timeout_s`` (the message says which)."""
    view = runtime_for(platform, root)
    with tempfile.TemporaryDirectory(prefix="qc-emulated-") as tmp:
        req_path, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        req_path.write_text(json.dumps({**request, "answer": str(answer)}))
        env = {"QEMU_CPU": platform.qemu_cpu or "", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.Popen(emulated_command(view, EMULATED_SCRIPT, str(req_path)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=tmp, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise PlatformUnavailable(
                f"{platform.name}: emulated ONNX Runtime ran past {timeout_s:.0f} s",
                hint="ask for fewer levels or a smaller model on the emulated platform", platform=platform.name)
        if proc.returncode != 0 or not answer.exists():
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            tail = (err or "").strip().splitlines()[-1:] or [""]
            raise PlatformUnavailable(
                f"{platform.name}: emulated ONNX Runtime failed ({how}) {tail[0][:300]}".rstrip(),
                hint=f"the arm64 runtime may be broken: {SETUP_HINT}", platform=platform.name)
        return json.loads(answer.read_text())
