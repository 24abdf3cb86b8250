"""PT2E and ORT paths side by side on two threads write the very files they write one after the other."""

from __future__ import annotations

import hashlib

import pytest

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions
from service.pipeline.quantize.side_by_side import side_by_side


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.onnx"))
            if p.name.count(".") == 1}


@pytest.mark.heavy
def test_paths_side_by_side_write_the_same_artifacts_as_in_sequence(tmp_path):
    """And the per-tensor table beside advice's first phase: the same table, the same candidates with the
    same numbers; only the timing phase, alone in both, gives figures that move from run to run."""
    options = ComparisonOptions(calibration_samples=4, eval_samples=2, latency={"enabled": False},
                                levels=["disable_all", "all"], layers={"enabled": True},
                                # seconds, not the default share of a tiny job, which measures one candidate
                                advice={"enabled": True}, extras={"seconds": 60})
    reports = {}
    for parallel in (False, True):
        out = tmp_path / str(parallel)
        seen = []
        reports[parallel] = run_comparison(
            # op_zoo_net: six candidates, so some are made beside the table (tiny_conv_net has one, the best,
            # which is made and timed before the table)
            ComparisonRequest(options=options, example="op_zoo_net", parallel_paths=parallel), out,
            progress=lambda stage, done, total: seen.append((stage, done, total)))
        assert [x for x in seen if x[0] == "quantize"][-1] == ("quantize", 3, 3)
    seq, par = reports[False], reports[True]
    assert {a: x.status for a, x in par.artifacts.items()} == {a: x.status for a, x in seq.artifacts.items()}
    assert all(x.status == "ok" for x in par.artifacts.values())
    assert _digests(tmp_path / "True" / "artifacts") == _digests(tmp_path / "False" / "artifacts")
    for name in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        assert par.artifacts[name].optimized["all"].numerics == seq.artifacts[name].optimized["all"].numerics
    assert par.layers.rows == seq.layers.rows and par.layers.rows

    def made(report):  # what advice's first phase decides: which candidates, their SQNR and coverage
        return sorted((e.artifact, str(e.change), e.measured.after.sqnr_db, e.measured.after.int8_coverage)
                      for e in report.advice + report.advice_refuted if e.measured)

    assert made(par) == made(seq) and made(par)
    # every candidate but the best one, which is made and timed before the table (issue 47)
    beside = ["computed beside the per-tensor table" in e.measured.how for e in par.advice + par.advice_refuted
              if e.measured]
    assert len(beside) >= 2 and sum(beside) == len(beside) - 1
    assert not any("beside" in e.measured.how for e in seq.advice + seq.advice_refuted if e.measured)
    assert par.timings["layers"] > 0 and par.timings["advice"] > 0


def test_side_by_side_runs_the_second_on_another_thread_only_when_asked():
    import threading

    main = threading.get_ident()
    a, b = side_by_side(lambda: threading.get_ident(), lambda: threading.get_ident(), parallel=True)
    assert a == main and b != main
    a, b = side_by_side(lambda: threading.get_ident(), lambda: threading.get_ident(), parallel=False)
    assert a == b == main


@pytest.mark.heavy
def test_a_model_past_the_size_cap_makes_its_advice_after_the_table(tmp_path, monkeypatch):
    """The per-tensor table is the job's peak of memory: past BESIDE_LAYERS_MAX_MODEL_BYTES advice's
    re-quantizations do not run beside it, even with two cores asked for."""
    import service.pipeline.compare as compare

    monkeypatch.setattr(compare, "BESIDE_LAYERS_MAX_MODEL_BYTES", 0)
    options = ComparisonOptions(calibration_samples=4, eval_samples=2, latency={"enabled": False},
                                levels=["disable_all", "all"], layers={"enabled": True},
                                # seconds, not the default share of a tiny job, which measures one candidate
                                advice={"enabled": True}, extras={"seconds": 60})
    report = run_comparison(ComparisonRequest(options=options, example="tiny_conv_net", parallel_paths=True), tmp_path)
    measured = [e for e in report.advice + report.advice_refuted if e.measured]
    assert measured and not any("beside" in e.measured.how for e in measured)


def test_side_by_side_torch_runs_on_one_core_and_gets_its_threads_back():
    """Side by side each path has one core: torch's pool would take both and fight ORT's calibration session
    (a CenterNet's PT2E path 75 s instead of 43 s). Torch's thread count comes back after, and in sequence
    it is never touched."""
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        seen, _ = side_by_side(torch.get_num_threads, lambda: None, parallel=True)  # the ORT side runs no torch
        assert seen == 1 and torch.get_num_threads() == 2
        assert side_by_side(torch.get_num_threads, torch.get_num_threads, parallel=False) == (2, 2)
        def failing():
            raise RuntimeError("a path failed")

        with pytest.raises(RuntimeError):
            side_by_side(failing, lambda: None, parallel=True)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_on_a_busy_machine_the_pt2e_path_runs_torch_on_one_thread(tmp_path, monkeypatch):
    """Another job running: the paths run one after the other, and torch's pool, which would wait on a core
    someone else holds (a CenterNet's PT2E path: 100 s against 43 s), is held to one thread, then given back."""
    import torch

    import service.pipeline.quantize.stage as quantize_stage

    seen = []
    real = quantize_stage.qdq_from_pt2e

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(quantize_stage, "qdq_from_pt2e", recording)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # what torch takes on two cores, whatever this process was started with
        options = ComparisonOptions(calibration_samples=2, eval_samples=1, latency={"enabled": False},
                                    levels=["all"], layers={"enabled": False}, advice={"enabled": False})
        report = run_comparison(ComparisonRequest(options=options, example="conv_relu", parallel_paths=False,
                                                  concurrent_jobs=lambda: 2), tmp_path)
        assert report.artifacts["pt2e_qdq"].status == "ok"
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_torch_path_takes_its_threads_back_once_the_path_beside_it_is_done():
    """The ORT paths finish first; from then on the PT2E path's steps (calibration samples, the export) have both
    cores again, or the second would idle. Only the torch thread itself can: the count is per thread (OpenMP)."""
    import threading
    import time

    import torch

    from service.pipeline.quantize.side_by_side import reclaim_idle_core

    before = torch.get_num_threads()
    ort_may_finish = threading.Event()

    def torch_path():
        seen = [torch.get_num_threads()]
        reclaim_idle_core()  # the other path is still running: nothing to take back
        seen.append(torch.get_num_threads())
        ort_may_finish.set()
        deadline = time.monotonic() + 10
        while torch.get_num_threads() == 1 and time.monotonic() < deadline:
            reclaim_idle_core()
            time.sleep(0.01)
        return seen + [torch.get_num_threads()]

    try:
        torch.set_num_threads(2)
        seen, _ = side_by_side(torch_path, lambda: ort_may_finish.wait(10), parallel=True)
        assert seen == [1, 1, 2] and torch.get_num_threads() == 2
        reclaim_idle_core()  # outside side_by_side: changes nothing
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
