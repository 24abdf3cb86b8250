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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ChildRuntime:
    """A runtime in a child process of its own (its own session, so a timeout kills its whole group): what
    it is called in a refusal, and what a user can do when it runs too long or fails."""

    platform: Platform
    what: str  # "emulated ONNX Runtime", "the target's process"
    timeout_hint: str
    broken_hint: str


def answer_from_child(runtime: ChildRuntime, command: list[str], request: dict, *, env: dict, timeout_s: float,
                      stdout=subprocess.PIPE) -> tuple[dict, str]:
    """``request`` written to ``request.json`` in a fresh folder (with ``answer``: where to write), ``command``
    run there with the request's path as its last argument; (the answer it wrote, its stderr).

    Raises PlatformUnavailable when it dies of a signal, exits non-zero, writes no answer or runs past
    ``timeout_s`` (the message says which)."""
    name = runtime.platform.name
    with tempfile.TemporaryDirectory(prefix="qc-child-") as tmp:
        req_path, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        req_path.write_text(json.dumps({**request, "answer": str(answer)}))
        proc = subprocess.Popen([*command, str(req_path)], stdout=stdout, stderr=subprocess.PIPE, text=True,
                                env={**env, "HOME": tmp}, cwd=tmp, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise PlatformUnavailable(f"{name}: {runtime.what} ran past {timeout_s:.0f} s",
                                      hint=runtime.timeout_hint, platform=name) from None
        if proc.returncode != 0 or not answer.exists():
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            tail = [ln for ln in (err or "").strip().splitlines() if ln.strip()][-1:] or [""]
            raise PlatformUnavailable(f"{name}: {runtime.what} failed ({how}) {tail[0][:300]}".rstrip(),
                                      hint=runtime.broken_hint, platform=name)
        return json.loads(answer.read_text()), err or ""


def emulated_run(platform: Platform, request: dict, *, timeout_s: float, root: Path | None = None) -> dict:
    """Run ``emulated_ort.py`` on ``request`` under ``platform``'s emulated CPU; its answer (``answer_from_child``:
    PlatformUnavailable when the runtime is missing, dies, or runs past ``timeout_s``)."""
    view = runtime_for(platform, root)
    env = {"QEMU_CPU": platform.qemu_cpu or "", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    runtime = ChildRuntime(platform, "emulated ONNX Runtime",
                           timeout_hint="ask for fewer levels or a smaller model on the emulated platform",
                           broken_hint=f"the arm64 runtime may be broken: {SETUP_HINT}")
    return answer_from_child(runtime, emulated_command(view, EMULATED_SCRIPT), request, env=env,
                             timeout_s=timeout_s)[0]
