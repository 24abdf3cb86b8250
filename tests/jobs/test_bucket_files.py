"""Job files in a real S3-compatible bucket (SeaweedFS on loopback): what a worker stores is what
the API reads, identical files are stored once, a reader never sees the report before the files it
lists, and a bad bucket setting stops the process at start-up with one line that says why."""

from __future__ import annotations

import os
import secrets
import threading
import time

import httpx
import pytest

from service.config import ConfigurationError, Settings
from service.jobs.factory import check_deployment
from service.jobs.spec import JobSpec
from service.jobs.storage.bucket import BucketFiles
from service.jobs.storage.report_file import write_report
from service.jobs.store import JobRecord
from tests.deploy.servers import PG_PASSWORD
from live_server import free_port


@pytest.fixture
def bucket(s3, monkeypatch):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    return s3.create_bucket("qc-" + secrets.token_hex(4))


def _files(tmp_path, bucket, **kw) -> BucketFiles:
    return BucketFiles(Settings(data_dir=tmp_path / "worker", storage_url=f"s3://{bucket}/some/prefix", **kw))


def _record(spec: JobSpec, attempts: int = 1) -> JobRecord:
    return JobRecord(id=spec.id, status="running", spec=spec, cache_key=None, created_at=0.0, started_at=0.0,
                     finished_at=None, stage=None, done=0, total=0, error=None, attempts=attempts)


def _submit(files: BucketFiles, tmp_path, inputs: dict[str, bytes]) -> JobSpec:
    staged = tmp_path / f"staged-{secrets.token_hex(3)}"
    for rel, data in inputs.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_bytes(data)
    spec = JobSpec(id=secrets.token_hex(16), model_file="input/model.onnx")
    files.create(spec, staged)
    assert not staged.exists()  # the API's staged upload is gone once stored
    return spec


def test_a_job_goes_through_the_bucket_and_identical_files_are_stored_once(s3, bucket, tmp_path):
    files = _files(tmp_path, bucket)
    model, archive = os.urandom(50_000), os.urandom(9_000)
    spec = _submit(files, tmp_path, {"input/model.onnx": model, "input/upload.zip": archive})
    folder = files.checkout(_record(spec))
    assert (folder / "input" / "model.onnx").read_bytes() == model and (folder / "job.json").is_file()
    # The job, as runner.py leaves a folder: fp32.onnx hard-linked to the upload (dedupe_job_files),
    # the archive consumed, the report written.
    (folder / "artifacts").mkdir()
    os.link(folder / "input" / "model.onnx", folder / "artifacts" / "fp32.onnx")
    qdq = os.urandom(20_000)
    (folder / "artifacts" / "ort_qdq.onnx").write_bytes(qdq)
    (folder / "input" / "upload.zip").unlink()
    write_report(folder, '{"id": "%s"}' % spec.id)
    files.checkin(spec.id, folder)
    files.discard(spec.id, folder)
    assert not folder.exists()

    prefix = f"some/prefix/jobs/{spec.id}/"
    stored = s3.keys(bucket, prefix)
    assert sorted(k[len(prefix):] for k in stored) == [
        "artifacts/ort_qdq.onnx", "files.json", "input/model.onnx", "job.json", "report.json.gz"]
    assert files.artifacts(spec.id) == {"fp32.onnx": len(model), "ort_qdq.onnx": len(qdq)}
    for name, data in (("fp32.onnx", model), ("ort_qdq.onnx", qdq)):
        got = files.download(spec.id, name, filename=name)
        assert got.size == len(data) and b"".join(got.chunks) == data
    assert files.report_bytes(spec.id) == ('{"id": "%s"}' % spec.id).encode()
    (usage,) = [u for u in files.usage({spec.id: ("succeeded", 1.0)}) if u.id == spec.id]
    assert usage.bytes == sum(stored.values()) and usage.input_bytes == len(model)  # the model counted once
    files.delete(spec.id)
    assert s3.keys(bucket, prefix) == {} and files.report_version(spec.id) is None


def test_a_reader_never_sees_the_report_before_every_artifact(s3, bucket, tmp_path):
    files = _files(tmp_path, bucket)
    spec = _submit(files, tmp_path, {"input/model.onnx": b"m" * 5000})
    folder = files.checkout(_record(spec))
    (folder / "artifacts").mkdir()
    written = {f"a{i}.onnx": os.urandom(3 << 20) for i in range(6)}
    for name, data in written.items():
        (folder / "artifacts" / name).write_bytes(data)
    write_report(folder, "{}")
    seen: dict = {"polls": 0}

    def read():
        reader = _files(tmp_path, bucket)
        while True:
            seen["polls"] += 1
            if reader.report_version(spec.id) is not None:
                seen["artifacts"] = reader.artifacts(spec.id)
                return
            time.sleep(0.005)

    t = threading.Thread(target=read)
    t.start()
    files.checkin(spec.id, folder)
    t.join(30)
    assert seen["polls"] > 1  # the reader was looking while the files went up
    assert seen["artifacts"] == {name: len(data) for name, data in written.items()}


def test_a_redirect_download_is_a_presigned_url_that_needs_no_credentials(s3, bucket, tmp_path):
    files = _files(tmp_path, bucket, storage_downloads="redirect")
    spec = _submit(files, tmp_path, {"input/model.onnx": b"m" * 5000})
    folder = files.checkout(_record(spec))
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "ort_qdq.onnx").write_bytes(b"quantized")
    files.checkin(spec.id, folder)
    got = files.download(spec.id, "ort_qdq.onnx", filename="net-1234.ort_qdq.onnx")
    assert got.size == 9 and got.chunks is None and got.redirect.startswith(s3.endpoint + f"/{bucket}/")
    r = httpx.get(got.redirect)  # no credentials: the signature in the URL is the permission
    assert r.status_code == 200 and r.content == b"quantized"
    assert r.headers["content-disposition"] == 'attachment; filename="net-1234.ort_qdq.onnx"'


def test_a_rerun_starts_from_its_inputs_only(s3, bucket, tmp_path):
    files = _files(tmp_path, bucket)
    spec = _submit(files, tmp_path, {"input/model.onnx": b"m" * 5000})
    folder = files.checkout(_record(spec))
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "fp32.onnx").write_bytes(b"half of an earlier attempt")
    files.checkin(spec.id, folder)  # a worker lost after storing files (no report)
    again = files.checkout(_record(spec, attempts=2))
    assert sorted(p.relative_to(again).as_posix() for p in again.rglob("*") if p.is_file()) == [
        "input/model.onnx", "job.json"]
    assert files.artifacts(spec.id) == {}
    assert files.checkout(_record(JobSpec(id="0" * 32))) is None  # no files at all: the job's folder is missing


@pytest.mark.parametrize("case, match", [
    ("missing bucket", "the bucket 'no-such-bucket' does not exist at http://127.0.0.1:"),
    ("wrong secret", "refused the credentials for s3://"),
    ("no server", "cannot reach the S3 endpoint http://127.0.0.1:"),
])
def test_a_bad_bucket_setting_fails_at_start_up_saying_why(s3, bucket, tmp_path, monkeypatch, case, match):
    name = bucket
    if case == "missing bucket":
        name = "no-such-bucket"
    elif case == "wrong secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    settings = Settings(data_dir=tmp_path / "var", storage_url=f"s3://{name}/p")
    with pytest.raises(ConfigurationError, match="^QUANTCOMPARE_STORAGE_URL: .*" + match) as e:
        check_deployment(settings)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("case, match", [
    ("no server", "cannot connect to the job store PostgreSQL postgresql://qc:\\*\\*\\*@127.0.0.1:"),
    ("wrong password", "password authentication failed for user \"qc\""),
])
def test_a_bad_database_setting_fails_at_start_up_saying_why(postgres, tmp_path, case, match):
    url = postgres.url(password="wrong") if case == "wrong password" else \
        f"postgresql://qc:{PG_PASSWORD}@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(ConfigurationError, match="QUANTCOMPARE_DATABASE_URL: .*" + match) as e:
        check_deployment(Settings(data_dir=tmp_path / "var", database_url=url))
    assert PG_PASSWORD not in str(e.value) and ":wrong@" not in str(e.value)  # the URL is shown without its password


def test_a_job_whose_results_cannot_be_stored_fails_saying_so(tmp_path, monkeypatch):
    from service.jobs.executor import LocalExecutor
    from test_pool import make_settings, submit, wait_finished
    from tests.deploy.servers import S3Server

    server = S3Server(tmp_path / "s3").start()  # its own: this test takes it away
    try:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        bucket = server.create_bucket("qc-gone")
        ex = LocalExecutor(make_settings(tmp_path / "var", workers=1, storage_url=f"s3://{bucket}/p"))
        ex.start()
        try:
            job_id = submit(ex, "sleep 2")
            while ex.get(job_id).stage is None:  # its process runs it (inputs in scratch)
                time.sleep(0.05)
            server.stop()  # the bucket goes away while the job runs
            rec = wait_finished(ex, job_id, timeout=60)
        finally:
            ex.stop()
    finally:
        server.stop()
    assert rec.status == "failed" and rec.error["code"] == "storage_unavailable"
    assert rec.error["detail"].startswith("the job's results could not be stored: the file storage ")
    assert list((tmp_path / "var" / "jobs").iterdir()) == []  # its scratch went too


def test_retention_and_the_data_budget_apply_to_the_bucket(s3, bucket, tmp_path):
    from service.jobs.executor import LocalExecutor
    from service.jobs.pool import sweep_expired
    from test_pool import make_settings

    # A 20 MiB input reserves 80 MiB (disk.RESERVE_FACTOR): in 0.11 GB two such jobs fit, a third only
    # once the oldest finished one is gone.
    settings = make_settings(tmp_path / "var", storage_url=f"s3://{bucket}/b", max_data_gb=0.11, retention_hours=1)
    ex = LocalExecutor(settings, start_pool=False)

    def finished_job(size: int) -> str:
        staged = ex.staging_dir()
        (staged / "input").mkdir()
        (staged / "input" / "model.onnx").write_bytes(os.urandom(size))
        rec = ex.submit(JobSpec(id=secrets.token_hex(16), model_file="input/model.onnx"), staged, cache_key=None)
        assert ex.store.claim_next().id == rec.id and ex.store.finish(rec.id, "succeeded")
        return rec.id

    oldest, newer = finished_job(20 << 20), finished_job(20 << 20)
    assert {u.id for u in ex.files.usage(ex.store.statuses())} >= {oldest, newer}
    third = finished_job(20 << 20)  # needs room: the oldest finished job is evicted, row and objects
    assert ex.store.get(oldest) is None and s3.keys(bucket, f"b/jobs/{oldest}/") == {}
    assert s3.keys(bucket, f"b/jobs/{newer}/") and ex.store.get(newer) is not None
    time.sleep(1.2)
    expired = make_settings(tmp_path / "var", storage_url=f"s3://{bucket}/b", retention_hours=1 / 3600)
    assert sorted(sweep_expired(expired, ex.store, ex.files)) == sorted([newer, third])
    assert s3.keys(bucket, "b/jobs/") == {} and ex.store.ids() == set()
    ex.store.close()


def test_a_running_jobs_partial_report_reaches_the_bucket_and_goes_with_the_final_one(s3, bucket, tmp_path):
    """The report as it comes (issue 39) with no shared folder: the supervisor stores the worker's partial
    report as progress comes in, the API reads it from the bucket, and the finished report replaces it."""
    from service.jobs.storage.report_file import write_partial_report

    files = _files(tmp_path, bucket)
    spec = _submit(files, tmp_path, {"input/model.onnx": b"model"})
    folder = files.checkout(_record(spec))
    assert files.report_version(spec.id, partial=True) is None
    write_partial_report(folder, '{"partial": true, "sections_done": ["files"]}')
    files.store_partial(spec.id, folder)
    first = files.report_version(spec.id, partial=True)
    assert first is not None and files.report_bytes(spec.id, partial=True) == b'{"partial": true, "sections_done": ["files"]}'
    files.store_partial(spec.id, folder)  # unchanged: nothing stored again
    assert files.report_version(spec.id, partial=True) == first
    time.sleep(0.01)
    write_partial_report(folder, '{"partial": true, "sections_done": ["files", "level_graphs"]}')
    files.store_partial(spec.id, folder)
    assert b"level_graphs" in files.report_bytes(spec.id, partial=True)
    assert files.report_version(spec.id) is None  # a partial report is no report: the job has not succeeded
    (folder / "artifacts").mkdir()
    write_report(folder, '{"partial": false}')
    files.checkin(spec.id, folder)
    assert files.report_bytes(spec.id) == b'{"partial": false}'
    assert files.report_version(spec.id, partial=True) is None
