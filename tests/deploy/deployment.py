"""The deployment the tests in this folder run: PostgreSQL, an S3 server (SeaweedFS), Redis, the API and
two `quantcompare worker` processes on loopback, each with its own scratch directory (no shared directory),
and the client side (a submitter that retries as a real client does)."""

from __future__ import annotations

import json
import re
import secrets
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import psycopg
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "celery"))
from cluster import RedisServer, Worker  # noqa: E402
from live_server import LiveServer  # noqa: E402

JOB_TIMEOUT_S = 30
LOST_AFTER_S = 2
BURST = 60
# The burst's jobs: the ORT QDQ path at one level, one sample, nothing timed.
LIGHT = {"artifacts": ["ort_qdq"], "calibration_samples": 1, "eval_samples": 1, "levels": ["disable_all"],
         "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False},
         "ort": {"pre_process": False}}
# A job that runs a few seconds (the PT2E path too) and has level graphs to make again on download.
FULLER = {**LIGHT, "artifacts": ["pt2e_qdq", "ort_qdq"], "calibration_samples": 2, "levels": ["disable_all", "all"]}


def tiny_model() -> bytes:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


MODEL = tiny_model()


class Deployment:
    def __init__(self, root: Path, postgres, s3):
        self.root = root
        self.postgres = postgres
        self.s3 = s3
        self.redis = RedisServer(root / "redis").start()
        self.bucket = s3.create_bucket("qc-deploy-" + secrets.token_hex(3))
        self.database_url = postgres.new_database_url()
        self.api = LiveServer(
            root / "api", fault_jobs=False, cwd=root, executor="celery", broker_url=self.redis.url(0),
            database_url=self.database_url, storage_url=f"s3://{self.bucket}/qc", workers=1,
            job_timeout_s=JOB_TIMEOUT_S, job_lost_after_s=LOST_AFTER_S, max_queue=200,
            # The toolchains imported before "ready"; the warm-up comparison skipped (start-up time).
            worker_preload="torch,onnx,onnxruntime,service.pipeline.compare")
        self.api.env.update(s3.env())
        self.api.start()
        self.workers = [Worker({**self.api.env, "QUANTCOMPARE_DATA_DIR": str(root / f"worker{i}")}, root, f"w{i}",
                               cwd=root) for i in range(2)]
        with ThreadPoolExecutor(2) as pool:  # both warm up at once
            list(pool.map(lambda w: w.start(timeout=300), self.workers))

    def rows(self) -> dict[str, dict]:
        with psycopg.connect(self.database_url) as c:
            cur = c.execute("SELECT id, status, attempts FROM jobs")
            return {r[0]: {"status": r[1], "attempts": r[2]} for r in cur.fetchall()}

    def runs(self, job_id: str) -> list[str]:
        """Names of the workers whose pool started this job (once per run)."""
        return [w.name for w in self.workers for _ in re.finditer(f"job {job_id} -> worker", w.log())]

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        self.api.stop()
        self.redis.stop()


def submit(api: LiveServer, options: dict, *, wait: float = 0, deadline_s: float = 120) -> httpx.Response:
    """POST an upload the way a client that retries does: through connection errors and 503s."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with api.client(timeout=60) as c:
                r = c.post("/v1/comparisons", params={"wait": wait} if wait else None,
                           files={"model": ("tiny.onnx", MODEL)}, data={"options": json.dumps(options)})
            if r.status_code != 503:
                return r
        except httpx.HTTPError:
            pass  # the API is down or went away mid-request: try again
        assert time.monotonic() < deadline, "the API did not take the submission"
        time.sleep(0.3)


def finished(api: LiveServer, job_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            job = api.wait_job(job_id, timeout=2)
            if job["status"] in ("succeeded", "failed"):
                return job
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"job {job_id} did not finish"
        time.sleep(0.2)
