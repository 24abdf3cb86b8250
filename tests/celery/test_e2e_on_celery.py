"""tests/e2e's service tests with the real toolchain (conv_relu, latency off) on the Celery executor."""

from __future__ import annotations

import psutil
from test_service_end_to_end import (  # noqa: F401  (collected here, with this folder's fixtures)
    test_an_example_comes_back_as_a_full_report,
    test_an_uploaded_onnx_model_is_compared_and_then_cached,
    test_every_artifact_downloads_as_a_loadable_onnx_file,
)


def test_neither_the_api_nor_the_celery_worker_imports_torch_only_its_pool_processes(real_server, conv_relu_job):
    api = psutil.Process(real_server.proc.pid)
    assert not [m.path for m in api.memory_maps() if "libtorch" in m.path]
    worker = real_server.cluster.workers[0]
    assert not [m.path for m in psutil.Process(worker.proc.pid).memory_maps() if "libtorch" in m.path]
    pool = [psutil.Process(p) for p in worker.pool_pids()]
    assert any("libtorch" in m.path for p in pool for m in p.memory_maps())


def test_nothing_is_written_outside_the_job_folders(real_server, conv_relu_job):
    root = real_server.cluster.root
    stray = [p.name for p in root.iterdir() if p.name != "var" and not p.name.endswith(".log")]
    assert stray == []
