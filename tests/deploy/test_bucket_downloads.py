"""The real API on the local executor with its files in a bucket: a job's artifacts stream from the
bucket through the API (the presigned redirect: tests/jobs/test_bucket_files.py), and a server whose
bucket is missing does not start: it exits at once with one line saying so. Jobs are
tests/jobs/fault_jobs commands (the storage is under test here, not the toolchain)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from tests.deploy.servers import s3  # noqa: F401  (session fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import QUANTCOMPARE, LiveServer  # noqa: E402


def _server(tmp_path, s3, **settings) -> LiveServer:  # noqa: F811
    bucket = s3.create_bucket("qc-dl-" + secrets.token_hex(3))
    server = LiveServer(tmp_path / "var", storage_url=f"s3://{bucket}/p", workers=1, **settings)
    server.env.update(s3.env())
    server.bucket = bucket
    return server.start()


def test_an_artifact_streams_from_the_bucket_through_the_api(tmp_path, s3):  # noqa: F811
    server = _server(tmp_path, s3)
    try:
        with server.client() as c:
            r = c.post("/v1/comparisons", params={"wait": 30}, files={"model": ("net.onnx", b"ok")})
            job = r.json()
            assert job["status"] == "succeeded", job
            listing = {a["name"]: a["size"] for a in c.get(job["links"]["artifacts"]).json()["artifacts"]}
            want = b"not really onnx: ort_qdq.onnx"  # what fault_jobs wrote
            assert listing["ort_qdq.onnx"] == len(want)
            got = c.get(f"{job['links']['artifacts']}/ort_qdq.onnx")
            assert got.status_code == 200 and got.content == want
            assert got.headers["content-disposition"] == f'attachment; filename="net-{job["id"][:8]}.ort_qdq.onnx"'
            assert c.get(f"{job['links']['artifacts']}/nothing.onnx").status_code == 404
        assert list((server.data_dir / "jobs").iterdir()) == []  # the worker's scratch is gone: all in the bucket
    finally:
        server.stop()


def test_a_server_whose_bucket_is_missing_exits_at_start_with_one_line(tmp_path, s3):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUANTCOMPARE_")}
    env.update(s3.env(), QUANTCOMPARE_DATA_DIR=str(tmp_path / "var"), QUANTCOMPARE_STORAGE_URL="s3://not-made-yet/p")
    # `quantcompare worker` runs the same check (cli_worker.preflight) before it takes a job.
    proc = subprocess.run([str(QUANTCOMPARE), "serve", "--port", "1"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: QUANTCOMPARE_STORAGE_URL: the bucket 'not-made-yet' does not exist at {s3.endpoint}: "
                      "create it, or fix the URL"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
