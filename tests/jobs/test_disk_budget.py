"""QUANTCOMPARE_MAX_DATA_GB: finished jobs are evicted oldest first; a job that cannot fit gets 503."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import LiveServer  # noqa: E402

from service.jobs.storage.disk import JobOnDisk, dedupe_job_files, folder_bytes, plan_for_new_job  # noqa: E402

MB = 1_000_000


def _job(i, *, finished=True, at=None, input_mb=0, mb=0):
    return JobOnDisk(id=f"j{i}", finished=finished, finished_at=at, input_bytes=input_mb * MB, bytes=mb * MB)


def test_the_plan_evicts_finished_jobs_oldest_first_and_only_when_that_makes_room():
    jobs = [_job(1, at=30, mb=20), _job(2, at=10, mb=20), _job(3, at=20, mb=20),
            _job(4, finished=False, input_mb=10, mb=15)]  # running: holds max(64 MiB, 4 x 10 MB) - 15 MB = 52.1 MB
    # 75 used + 52.1 held leave 72.9 MB: 80 more need the oldest finished job (j2) gone.
    plan = plan_for_new_job(jobs, need=80 * MB, budget=200 * MB)
    assert plan.fits and plan.evict == ["j2"]
    assert plan_for_new_job(jobs, need=70 * MB, budget=200 * MB).evict == []
    plan = plan_for_new_job(jobs, need=110 * MB, budget=200 * MB)
    assert plan.fits and plan.evict == ["j2", "j3"]
    # Even with every finished job gone it would not fit: nothing is evicted for nothing.
    plan = plan_for_new_job(jobs, need=190 * MB, budget=200 * MB)
    assert not plan.fits and plan.evict == []


def test_identical_model_files_in_a_job_are_stored_once(tmp_path):
    (tmp_path / "input").mkdir()
    (tmp_path / "artifacts").mkdir()
    blob = os.urandom(100_000)
    (tmp_path / "input" / "model.onnx").write_bytes(blob)
    (tmp_path / "artifacts" / "fp32.onnx").write_bytes(blob)
    (tmp_path / "artifacts" / "ort_qdq.onnx").write_bytes(os.urandom(50_000))
    (tmp_path / "artifacts" / "fp32.data").write_bytes(blob)  # external data: onnx refuses hard links, left alone
    before = folder_bytes(tmp_path)
    assert dedupe_job_files(tmp_path) == 100_000
    assert os.path.samefile(tmp_path / "input" / "model.onnx", tmp_path / "artifacts" / "fp32.onnx")
    assert not os.path.samefile(tmp_path / "input" / "model.onnx", tmp_path / "artifacts" / "fp32.data")
    assert folder_bytes(tmp_path) == before - 100_000
    assert (tmp_path / "artifacts" / "fp32.onnx").read_bytes() == blob


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory):
    s = LiveServer(tmp_path_factory.mktemp("budget") / "var", workers=2, job_timeout_s=60, worker_memory_mb=1024,
                   max_upload_mb=64, max_data_gb=0.2, retention_hours=0).start()
    yield s
    s.stop()


def _post(client, command: str, pad_mb: int = 0, seed: int = 0):
    body = (command + " " * (pad_mb * MB)).encode()
    return client.post("/v1/comparisons", files={"model": ("net.onnx", body, "application/octet-stream")},
                       data={"options": json.dumps({"seed": seed})})


def test_a_full_data_dir_evicts_the_oldest_finished_job_then_refuses_with_503(small_disk):
    with small_disk.client(timeout=60) as c:
        done = []
        for seed in range(3):  # three finished jobs of 20 MB each
            job = _post(c, "ok", 20, seed).json()
            assert small_disk.wait_job(job["id"])["status"] == "succeeded"
            done.append(job["id"])
            time.sleep(0.05)
        sleeper = _post(c, "sleep 30", 0, 100).json()  # holds a 64 MB reservation while it runs
        # 60 MB used + 64 MB held + 80 MB for a new 20 MB upload > 200 MB: the oldest finished job goes.
        new = _post(c, "ok", 20, 101)
        assert new.status_code in (200, 202), new.text
        assert c.get(f"/v1/comparisons/{done[0]}").status_code == 404
        assert not (small_disk.data_dir / "jobs" / done[0]).exists()
        assert all(c.get(f"/v1/comparisons/{j}").status_code == 200 for j in done[1:])
        assert small_disk.wait_job(new.json()["id"])["status"] == "succeeded"
        # A second sleeper holds another 64 MB: 128 held + 80 needed > 200 even with nothing finished left.
        sleeper2 = _post(c, "sleep 30", 0, 102).json()
        full = _post(c, "ok", 20, 103)
        assert full.status_code == 503, full.text
        body = full.json()
        assert body["code"] == "data_dir_full" and "QUANTCOMPARE_MAX_DATA_GB" in body["detail"]
        assert int(full.headers["Retry-After"]) >= 1
        # Refused before anything was written or evicted: the finished jobs are all still there.
        assert [c.get(f"/v1/comparisons/{j}").status_code for j in [*done[1:], new.json()["id"]]] == [200] * 3
        assert not list((small_disk.data_dir / "tmp").glob("*"))
        # The README promises a join never gets a 503: an identical submission of a job in flight takes
        # no room, so even now it joins (room used to be made before the join was tried: 503).
        again = _post(c, "sleep 30", 0, 102)
        assert again.status_code == 202 and again.json()["id"] == sleeper2["id"], again.text
        assert not list((small_disk.data_dir / "tmp").glob("*"))
        for j in (sleeper, sleeper2):
            c.delete(f"/v1/comparisons/{j['id']}")


def test_an_extracted_archive_is_dropped_once_the_job_succeeded(tmp_path):
    import zipfile

    from service.jobs.storage.disk import drop_consumed_archive

    (tmp_path / "input").mkdir()
    (tmp_path / "artifacts").mkdir()
    archive = tmp_path / "input" / "model.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("net.onnx", b"graph")
        z.writestr("net.onnx.data", b"weights" * 1000)
    assert drop_consumed_archive(tmp_path, "input/model.zip") == 0  # not extracted (no fp32.onnx): kept
    assert archive.exists()
    (tmp_path / "artifacts" / "fp32.onnx").write_bytes(b"graph")
    plain = tmp_path / "input" / "model.onnx"
    plain.write_bytes(b"graph")
    assert drop_consumed_archive(tmp_path, "input/model.onnx") == 0 and plain.exists()  # an .onnx upload stays
    size = archive.stat().st_size
    assert drop_consumed_archive(tmp_path, "input/model.zip") == size
    assert not archive.exists()
