"""A path that runs out of memory says so, with the limit and what to change, whichever toolchain
ran out: torch's allocator, numpy, or inside the ONNX -> torch conversion (which reported it as a
conversion failure at whatever Conv it was building)."""

from __future__ import annotations

import numpy as np
import pytest

from service.errors import NonFiniteCalibration, PathSkipped
from service.pipeline.isolation import out_of_memory, run_path

torch = pytest.importorskip("torch")

TOO_BIG = 1 << 50  # elements: more than any machine maps


def _torch_alloc():
    return torch.empty(TOO_BIG)


def _numpy_alloc():
    return np.empty(TOO_BIG, dtype=np.float32)


def _conversion_that_ran_out():
    try:
        _torch_alloc()
    except RuntimeError as e:  # as program_from_onnx wraps a converter failure
        raise PathSkipped(f"ONNX -> torch conversion failed at Conv node 'c': {e}", stage="convert",
                          hint="upload a .pt2") from e


@pytest.mark.parametrize("fn", [_torch_alloc, _numpy_alloc, _conversion_that_ran_out])
def test_an_allocation_failure_is_reported_as_out_of_memory(fn):
    with pytest.raises(Exception) as raised:  # the oracle: the toolchain really fails to allocate
        fn()
    assert out_of_memory(raised.value)
    outcome = run_path("pt2e_qdq", "quantize", fn)
    assert not outcome.ok and not outcome.skipped  # the same model would go through with more memory
    err = outcome.error
    assert err.type == "MemoryError" and err.code == "out_of_memory" and err.message.startswith("out of memory: ")
    assert "ran out of memory" in err.hint and "input_shapes" in err.hint


def test_other_failures_keep_their_own_message():
    def skip():
        raise PathSkipped("no ONNX -> torch converter for Foo (opset 17) x1", stage="convert", hint="h")

    outcome = run_path("pt2e_qdq", "quantize", skip)
    assert outcome.skipped and outcome.error.type == "PathSkipped" and outcome.error.hint == "h"
    assert outcome.error.code == "path_skipped"  # the stable code CI switches on, not the class name
    assert not out_of_memory(ValueError("the model is fine"))

    def refused():
        raise NonFiniteCalibration("inf in 'x'", hint="h")

    def unexpected():
        raise KeyError("x_orig")

    assert run_path("ort_qdq", "quantize", refused).error.code == "nonfinite_calibration"
    err = run_path("ort_qdq", "quantize", unexpected).error
    assert (err.code, err.type) == ("path_failed", "KeyError") and "x_orig" in err.message


def test_the_hint_names_the_worker_s_own_limit():
    """Workers run under RLIMIT_AS (service/jobs/worker.py); the hint reads it from the process."""
    import subprocess
    import sys

    code = ("import resource; lim = 8192 * 1024 * 1024; resource.setrlimit(resource.RLIMIT_AS, (lim, lim)); "
            "from service.pipeline.isolation import memory_hint; print(memory_hint())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "8192 MiB" in out and "QUANTCOMPARE_WORKER_MEMORY_MB" in out


def test_a_file_ort_ran_at_no_level_fails_its_path_with_a_stable_code():
    from service.pipeline.verdict.decide import _with_levels
    from service.schemas.levels import OptimizedLevel
    from service.schemas.report import Artifact

    levels = {lv: OptimizedLevel(level=lv, error="run failed: Gather index 7 out of bounds") for lv in ("basic", "all")}
    art = _with_levels(Artifact(name="ort_qdq", status="ok"), levels)
    assert art.status == "failed" and (art.error.code, art.error.type) == ("ort_run_failed", "OrtRunFailed")
    assert "at basic: run failed: Gather index 7" in art.error.message
    one_ran = {**levels, "all": OptimizedLevel(level="all")}
    assert _with_levels(Artifact(name="ort_qdq", status="ok"), one_ran).status == "ok"


def test_a_full_disk_stops_the_job_instead_of_failing_one_path():
    """Each later path and the report would fail the same way: the job says disk_full once."""
    from service.errors import DiskFull

    def write():
        with open("/dev/full", "wb") as f:  # the kernel fails its writes with ENOSPC
            f.write(b"x" * 4096)
            f.flush()

    with pytest.raises(DiskFull, match="no space left on the disk while the ort_qdq path wrote its files"):
        run_path("ort_qdq", "quantize", write)
