from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import LiveServer  # noqa: E402


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    """The real thing: one warm worker that imports torch/onnx/onnxruntime and runs the core."""
    root = tmp_path_factory.mktemp("e2e")
    # Started in an empty folder: anything a toolchain writes to "the current directory" must
    # land in the job's folder, never here (test_nothing_is_written_outside_the_job_folders).
    s = LiveServer(root / "var", fault_jobs=False, workers=1, cwd=root).start()
    yield s
    s.stop()


FAST = {"calibration_samples": 4, "eval_samples": 2, "latency": {"runs": 3, "warmup": 1}}


@pytest.fixture(scope="session")
def fast() -> dict:
    """Options that keep a real comparison to a few seconds."""
    return FAST


@pytest.fixture(scope="session")
def conv_relu_job(real_server):
    with real_server.client(timeout=400) as c:
        r = c.post("/v1/comparisons", params={"wait": 300}, json={"example": "conv_relu", "options": FAST})
    assert r.status_code == 200, r.text
    return r.json()
