"""The PT2E path's wall-clock limit (``options.pt2e.time_limit_s``; on a server, half the job's time
limit): a PT2E path past it fails alone with ``path_time_limit``, naming the step it was in, and
the job reports the ORT paths. Before it, a PT2E path that ran past the job's time limit got the
worker killed and the ORT results, done long before, were lost with it (madmom's BLSTM, 7945 ops,
805 s: docs/history/notes.md, fifteenth pass)."""
from __future__ import annotations

import json
import re
import signal
import threading
import time

import pytest

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions
from service.pipeline.time_limit import TimeLimitReached, step, time_limited
from tests import models

QUICK = {"artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
         "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}


@pytest.fixture(scope="module")
def conv_upload(tmp_path_factory):
    """An ONNX upload (the PT2E path converts it to torch first): Conv -> Relu -> Conv."""
    return models.save("conv_chain", tmp_path_factory.mktemp("limit") / "convs.onnx", layers=2, channels=[3, 8, 4],
                       size=16, kernel=3, pads=1, scale=0.2, last_act=False, ir=8)


def test_a_pt2e_path_past_its_limit_fails_alone_and_the_ort_paths_are_reported(conv_upload, tmp_path):
    handler = signal.getsignal(signal.SIGALRM)
    options = ComparisonOptions.model_validate({**QUICK, "pt2e": {"time_limit_s": 0.05}})
    report = run_comparison(ComparisonRequest(model_path=conv_upload, model_name="convs.onnx", options=options),
                            tmp_path / "job")
    pt2e, ort = report.artifacts["pt2e_qdq"], report.artifacts["ort_qdq"]
    assert pt2e.status == "failed" and pt2e.error.code == "path_time_limit" and pt2e.error.stage == "quantize"
    # the message says which step it stopped in (50 ms lands in one step or another, by the machine)
    assert re.search(r"time limit of 0\.05 s in (the conversion to torch|torchao's|PT2E calibration|torch\.onnx\.export|"
                     r"writing the PT2E file)", pt2e.error.message), pt2e.error.message
    assert "options.pt2e.time_limit_s" in pt2e.error.hint and "options.artifacts" in pt2e.error.hint
    assert ort.status == "ok" and ort.optimized["disable_all"].numerics is not None
    # Nothing half-written is left to download, and the job's process has its alarm back as it was.
    assert not list((tmp_path / "job" / "artifacts").glob("pt2e_qdq.*"))
    assert signal.getsignal(signal.SIGALRM) is handler


def test_a_limit_the_path_stays_within_changes_nothing(tmp_path):
    options = ComparisonOptions.model_validate({**QUICK, "pt2e": {"time_limit_s": 600}})
    report = run_comparison(ComparisonRequest(example="conv_relu", options=options), tmp_path / "job")
    assert report.artifacts["pt2e_qdq"].status == "ok"


def test_the_service_limit_reaches_the_path_through_the_job_spec(tmp_path):
    """What a worker runs (jobs/runner.py): the spec's limit, the server's share of its job time limit
    (test_http_api.py checks the share), applies when the options leave it open."""
    from service.jobs.runner import run_comparison_job
    from service.jobs.spec import JobSpec
    from service.jobs.storage.report_file import read_report_bytes

    spec = JobSpec(id="a" * 32, example="conv_relu", options=ComparisonOptions.model_validate(QUICK).model_dump(mode="json"),
                   limits={"pt2e_time_limit_s": 0.05})
    run_comparison_job(spec, tmp_path, lambda *a: None)
    pt2e = json.loads(read_report_bytes(tmp_path))["artifacts"]["pt2e_qdq"]
    assert pt2e["status"] == "failed" and pt2e["error"]["code"] == "path_time_limit"


def test_the_limit_names_the_innermost_step_it_landed_in():
    with pytest.raises(TimeLimitReached) as info:
        with time_limited(0.05), step("outer"):
            with step("torch.onnx.export"):
                time.sleep(1)
    assert info.value.step == "torch.onnx.export"
    with pytest.raises(TimeLimitReached) as info:
        with time_limited(0.05), step("outer"):
            with step("done early"):
                pass
            time.sleep(1)
    assert info.value.step == "outer"


def test_the_toolchains_except_exception_cannot_swallow_the_limit():
    """torch's and onnxscript's fallbacks catch ``Exception``; the limit passes through them."""
    swallowed = 0
    with pytest.raises(TimeLimitReached):
        with time_limited(0.05):
            for _ in range(200):
                try:
                    time.sleep(0.01)
                except Exception:  # noqa: BLE001 - what a toolchain's fallback does
                    swallowed += 1
    assert swallowed == 0


def test_an_alarm_inside_an_import_waits_for_the_import(tmp_path, monkeypatch):
    """Stopped mid-import, a module would stay half-made in sys.modules for the process's life (torch,
    imported by the first PT2E path of a CLI run, lost ``torch._utils`` so)."""
    import sys

    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.3)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TimeLimitReached):
        with time_limited(0.05):
            import slow_to_import  # noqa: F401
            time.sleep(5)
    assert sys.modules["slow_to_import"].DONE is True


def test_an_outer_timer_keeps_its_due_time_and_still_fires_inside():
    """A process may time itself too (pytest-timeout here): its alarm still comes when it is due, inside
    the limit or after it, and not later for the limit having run."""
    outer = []
    previous = signal.signal(signal.SIGALRM, lambda *a: outer.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with time_limited(5):
            time.sleep(0.1)
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 0.1 < left <= 0.2 + 0.05 and not outer  # the outer timer, re-armed with what it had left
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        start = time.monotonic()
        with time_limited(5):
            time.sleep(0.2)  # the outer alarm lands inside the limit: its handler runs, the limit does not fire
        assert len(outer) == 1 and outer[0] - start < 0.15
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_off_the_main_thread_the_limit_is_not_enforced():
    """No signal reaches another thread: the call runs to its end (and the log says so)."""
    finished = []

    def body():
        with time_limited(0.01):
            time.sleep(0.1)
        finished.append(True)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert finished == [True]
