"""Job functions that exercise the worker pool, not the toolchain.

The "model" file of each job holds a command; the function reads it by a path *relative to the
current directory*, so every job also checks that the worker runs it in the job folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from service.errors import InvalidModel


def run(spec, job_dir: Path, progress) -> None:
    assert Path.cwd() == Path(job_dir), "worker must run the job in its folder"
    command, *args = Path(spec.model_file).read_text().split()
    (Path("ran.txt")).write_text(str(os.getpid()))
    if command == "ok":
        time.sleep(float(args[0]) if args else 0)  # "ok 0.5": still running when the POST answers
        for i, stage in enumerate(("prepare", "quantize", "optimize")):
            progress(stage, i + 1, 3)
        Path("artifacts").mkdir(exist_ok=True)
        for name in ("fp32.onnx", "ort_qdq.onnx", "ort_qdq.all.onnx"):
            Path("artifacts", name).write_bytes(b"not really onnx: " + name.encode())
        Path("report.json").write_text(minimal_report(spec).model_dump_json())
    elif command == "sleep":  # "sleep 60 quantize": sleeps in that stage (default prepare)
        stage = args[1] if len(args) > 1 else "prepare"
        progress(stage, 0, 1)
        time.sleep(float(args[0]))
        progress(stage, 1, 1)
    elif command == "stopped_path":  # a path stopped at its time limit, the job itself succeeds
        from service.pipeline.time_limit import TimeLimitReached, time_limited
        try:
            with time_limited(0.01):
                time.sleep(1)
        except TimeLimitReached:
            pass
        Path("report.json").write_text(minimal_report(spec).model_dump_json())
    elif command == "segv":
        progress("optimize", 2, 5)
        os.kill(os.getpid(), signal.SIGSEGV)
    elif command == "alloc":
        progress("quantize", 0, 1)
        block = bytearray(int(args[0]) * 1024 * 1024)  # one request past the limit: fails at once
        progress("quantize", 1, 1)
        del block
    elif command == "grandchild":
        # A helper process the job starts; a wall-clock kill must take it too.
        child = subprocess.Popen(["sleep", "120"])
        Path("grandchild.pid").write_text(str(child.pid))
        progress("evaluate", 0, 1)
        time.sleep(120)
    elif command == "user_error":
        raise InvalidModel("this is not a model", hint="upload an .onnx file")
    elif command == "bug":
        raise RuntimeError("secret internal state at /srv/secret/path")
    else:
        raise AssertionError(f"unknown command {command}")


def minimal_report(spec):
    """A valid report with almost nothing in it: the page must render it with 'not available'."""
    from datetime import datetime, timezone

    from service.pipeline.environment import environment
    from service.schemas.options import ComparisonOptions
    from service.schemas.report import ModelInfo, Report, SamplesInfo, Verdict

    return Report(
        id=spec.id, created_at=datetime.now(timezone.utc), environment=environment(),
        options=ComparisonOptions.model_validate(spec.options),
        model=ModelInfo(name=spec.model_name or "m", sha256="0" * 64, format="onnx", opset_imports={"ai.onnx": 17},
                        inputs=[], outputs=[], node_count=0),
        samples=SamplesInfo(source="generated", calibration_count=1, eval_count=1),
        artifacts={}, verdict=Verdict(passed=True),
    )
