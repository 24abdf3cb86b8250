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
    elif command == "levels":  # a real artifact whose "all" level graph was kept as digests only
        level_graph_job(spec)
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


def level_graph_job(spec) -> None:
    """artifacts/ort_qdq.onnx (a real MatMul) and a report whose ort_qdq 'all' level graph is not stored:
    a download makes it again in a subprocess, as for a real job (service/jobs/storage/level_downloads.py)."""
    import json
    import shutil

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from service.pipeline.runtime.level_graphs import session_and_level_graph

    w = numpy_helper.from_array(np.random.default_rng(0).random((64, 64), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    Path("artifacts").mkdir(exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "artifacts/ort_qdq.onnx")
    _, files = session_and_level_graph(Path("artifacts/ort_qdq.onnx"), "all", Path("level_graph"), intra_op_threads=1)
    shutil.rmtree("level_graph")
    report = json.loads(minimal_report(spec).model_dump_json())
    report["artifacts"] = {"ort_qdq": {"optimized": {"all": {
        "file": "ort_qdq.all.onnx", "file_stored": False, "graph_sha256": files.graph_sha256,
        "weights_sha256": files.data_sha256, "download_bytes": files.graph_bytes + files.data_bytes}}}}
    Path("report.json").write_text(json.dumps(report))  # the raw fields the download reads


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
