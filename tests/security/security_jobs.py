"""A job function with no toolchain: reports what a job can see of its process, then succeeds.

The worker runs it with the job folder as its current directory; it writes ``seen.json`` there.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

from fault_jobs import minimal_report


def run(spec, job_dir: Path, progress) -> None:
    progress("prepare", 1, 1)
    if spec.model_file and Path(spec.model_file).read_bytes().startswith(b"sleep"):
        time.sleep(0.5)  # long enough for a burst of submissions to fill the queue
    try:
        proc_environ = Path("/proc/self/environ").read_bytes().decode("utf-8", "replace")
    except OSError:
        proc_environ = ""
    seen = {
        "environ": dict(os.environ),
        "proc_environ": proc_environ,
        "cwd": os.getcwd(),
        "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0],
        "pgid_is_pid": os.getpgid(0) == os.getpid(),
    }
    Path("seen.json").write_text(json.dumps(seen))
    Path("report.json").write_text(minimal_report(spec).model_dump_json())
