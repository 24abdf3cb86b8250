"""The worker process: started once (spawn), imports the toolchain once, then runs jobs.

It talks to the supervisor over one pipe:

    supervisor -> worker   {"job": <JobSpec json>, "job_dir": str}  |  None (exit)
    worker -> supervisor   {"type": "ready"}
                           {"type": "progress", "job", "stage", "done", "total"}
                           {"type": "done", "job", "status": "succeeded"|"failed", "error": problem|None, "exiting": bool}

The worker is the leader of its own process group (so a wall-clock kill reaches anything it
started), dies with its parent (PR_SET_PDEATHSIG), runs under RLIMIT_AS, and runs each job with
the job folder as its current directory. It never catches a crash: a segfault or a kill is
the supervisor's to report.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import logging
import os
import shlex
import shutil as _shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

from service.errors import InternalError, QuantCompareError, WorkerMemoryLimit, error_from_os
from service.jobs.spec import JobSpec
from service.log_format import configure_logging
from service.pipeline import time_limit
from service.pipeline.isolation import address_space_limit
from service.schemas.api import problem_from_error

log = logging.getLogger("quantcompare.worker")

_PR_SET_PDEATHSIG = 1


def resolve_function(dotted: str):
    module, _, name = dotted.partition(":")
    if not module or not name:
        raise ValueError(f"job function must be 'module:function', got {dotted!r}")
    return getattr(importlib.import_module(module), name)


# What a worker keeps of the environment it was started from: what Python, the BLAS/OpenMP
# runtimes and the locale need. Everything else (QUANTCOMPARE_API_TOKEN and every other
# QUANTCOMPARE_* setting, cloud credentials, the operator's shell) never reaches a job.
WORKER_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
                   "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
LAUNCHER_NAME = "worker-python"


def worker_environment(environ=None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in WORKER_ENV_KEEP if k in env}


def clean_env_launcher(folder: Path | None = None) -> str | None:
    """Write a ``worker-python`` launcher that runs this interpreter under ``env -i`` with only
    :data:`WORKER_ENV_KEEP`. Returns its path, or None where it cannot run (no ``env``, a
    noexec temp dir): workers then only scrub ``os.environ`` (``/proc/self/environ`` keeps the
    start-up environment, so docs/security.md says to keep secrets out of the server's environment).
    """

    env_bin = _shutil.which("env") or "/usr/bin/env"
    try:
        # A private folder per process: API and Celery workers on several hosts may share the data
        # dir, and each host's launcher must name its own interpreter (no shared temp file to race on).

        private = Path(tempfile.mkdtemp(prefix="quantcompare-launcher-", dir=folder))
        atexit.register(_shutil.rmtree, private, ignore_errors=True)
        path = private / LAUNCHER_NAME
        assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in worker_environment().items())
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"#!/bin/sh\n# written by quantcompare at start: workers get a minimal environment\n"
                       f"exec {shlex.quote(env_bin)} -i {assigns} {shlex.quote(sys.executable)} \"$@\"\n")
        os.chmod(tmp, 0o700)
        os.replace(tmp, path)
        if os.access(env_bin, os.X_OK) and os.access(path, os.X_OK):
            return str(path)
    except OSError:
        pass
    log.warning("workers inherit the API's environment minus QUANTCOMPARE_*: could not write %s", LAUNCHER_NAME)
    return None


def _isolate(memory_mb: int) -> None:
    # Belt and braces (and the whole story without the launcher): no QUANTCOMPARE_* setting in a job.
    for key in [k for k in os.environ if k.startswith("QUANTCOMPARE_") or k not in WORKER_ENV_KEEP]:
        os.environ.pop(key, None)
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not glibc/Linux: the pipe's EOF still ends an idle worker
        pass
    address_space_limit(memory_mb)()
    # Ctrl-C in the terminal is the API's to handle; the supervisor ends us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_main(conn, *, preload: list[str], job_function: str, memory_mb: int, log_level: str = "INFO",
                log_format: str = "text") -> None:
    _isolate(memory_mb)
    # The toolchains log and warn loudly at INFO; our own loggers keep the service's level.
    configure_logging("WARNING", log_format, role="worker",
                      text_format="%(asctime)s worker[%(process)d] %(name)s %(levelname)s %(message)s")
    logging.getLogger("quantcompare").setLevel(log_level.upper())
    warnings.filterwarnings("ignore")
    for name in preload:
        try:
            module = importlib.import_module(name)
            # A preloaded module may define warm_up(): first-call costs paid before the first job.
            if callable(getattr(module, "warm_up", None)):
                module.warm_up()
        except Exception:  # a missing optional module must not keep the pool from starting
            log.warning("preload of %s failed:\n%s", name, traceback.format_exc())
    fn = resolve_function(job_function)

    conn.send({"type": "ready"})
    idle_dir = os.getcwd()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        spec = JobSpec.from_json(msg["job"])
        job_dir = Path(msg["job_dir"])
        last = [0.0, None]

        def progress(stage: str, done: int, total: int, _id=spec.id) -> None:
            now = time.monotonic()
            # Stage changes always go out; within a stage, at most ~10 updates a second.
            if stage != last[1] or now - last[0] > 0.1 or done == total:
                last[0], last[1] = now, stage
                conn.send({"type": "progress", "job": _id, "stage": stage, "done": int(done), "total": int(total)})

        exit_after = False
        stops_before = time_limit.stops
        try:
            os.chdir(job_dir)
            fn(spec, job_dir, progress)
            result = {"type": "done", "job": spec.id, "status": "succeeded", "error": None}
        except QuantCompareError as e:
            result = {"type": "done", "job": spec.id, "status": "failed", "error": problem_from_error(e)}
        except MemoryError:
            # Python saw the limit; native code may be left in a bad state, so this worker goes.
            exit_after = True
            result = {"type": "done", "job": spec.id, "status": "failed", "error": problem_from_error(WorkerMemoryLimit(
                f"the job ran out of memory (worker limit {memory_mb} MiB) during {last[1] or 'start'}",
                hint="try a smaller model, fewer samples, or raise QUANTCOMPARE_WORKER_MEMORY_MB"))}
        except BaseException as e:
            # A full disk is the machine's state (disk_full, with what to do); anything else is an
            # internal bug: the traceback goes to the log, never into the response.
            error = error_from_os(e, f"the job's {last[1] or 'start'} stage wrote or read its files")
            if error is None:
                log.error("job %s failed with an internal error:\n%s", spec.id, traceback.format_exc())
                error = InternalError(f"the job failed with an internal error during {last[1] or 'start'}",
                                      hint="this is a bug in quantcompare; the server log has the details")
            result = {"type": "done", "job": spec.id, "status": "failed", "error": problem_from_error(error)}
        finally:
            os.chdir(idle_dir)
        # A path stopped at its time limit may have left a toolchain's state half-made, whether or not the
        # job went on to succeed: a fresh worker next.
        exit_after = exit_after or time_limit.stops != stops_before
        try:
            # "exiting": the supervisor must not hand this worker another job in the moment before it goes.
            conn.send({**result, "exiting": exit_after})
        except (OSError, ValueError):
            return
        if exit_after:
            sys.exit(3)
