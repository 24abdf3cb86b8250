"""The service with the real toolchain: an example, an upload, artifacts, a worker killed mid-job."""

from __future__ import annotations

import os
import signal
import time

import onnx
import psutil

ARTIFACTS = ("pt2e_qdq", "ort_qdq", "ort_qoperator")


def test_an_example_comes_back_as_a_full_report(conv_relu_job):
    job = conv_relu_job
    assert job["status"] == "succeeded", job["error"]
    report = job["report"]
    assert report["id"] == job["id"] and report["model"]["name"] == "conv_relu"
    for name in ARTIFACTS:
        art = report["artifacts"][name]
        assert art["status"] == "ok", art["error"]
        assert set(art["optimized"]) == {"disable_all", "basic", "extended", "layout", "all"}


def test_every_artifact_downloads_as_a_loadable_onnx_file(real_server, conv_relu_job):
    with real_server.client() as c:
        listing = c.get(conv_relu_job["links"]["artifacts"]).json()["artifacts"]
        names = {a["name"] for a in listing}
        for art in ("fp32", *ARTIFACTS):
            assert f"{art}.onnx" in names and f"{art}.all.onnx" in names
        entry = next(a for a in listing if a["name"] == "ort_qdq.all.onnx")
        r = c.get(entry["url"])
        assert r.status_code == 200 and len(r.content) == entry["size"]
        assert r.headers["content-disposition"].endswith(f'conv_relu-{conv_relu_job["id"][:8]}.ort_qdq.all.onnx"')
        model = onnx.load_from_string(r.content)
        assert any(n.op_type.startswith("QLinear") for n in model.graph.node)


def test_an_uploaded_onnx_model_is_compared_and_then_cached(real_server, conv_relu_job, fast):
    FAST = fast
    with real_server.client(timeout=400) as c:
        fp32 = c.get(f"{conv_relu_job['links']['artifacts']}/fp32.onnx").content
        files = {"model": ("conv_relu.onnx", fp32)}
        import json

        data = {"options": json.dumps({**FAST, "input_shapes": {"x": [1, 3, 16, 16]}})}
        r = c.post("/v1/comparisons", params={"wait": 300}, files=files, data=data)
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] == "succeeded", job["error"]
        assert job["report"]["model"]["format"] == "onnx"
        assert job["report"]["artifacts"]["ort_qdq"]["status"] == "ok"
        again = c.post("/v1/comparisons", params={"wait": 300}, files=files, data=data).json()
        assert again["cached"] is True and again["id"] == job["id"]


def test_the_api_process_never_imports_torch(real_server, conv_relu_job):
    api = psutil.Process(real_server.proc.pid)
    assert not [m.path for m in api.memory_maps() if "libtorch" in m.path]
    worker = psutil.Process(real_server.worker_pids()[0])
    assert [m.path for m in worker.memory_maps() if "libtorch" in m.path]  # the warm worker has it


def test_killing_the_worker_mid_job_fails_that_job_and_a_new_worker_takes_the_next(real_server, conv_relu_job, fast):
    FAST = fast
    with real_server.client(timeout=400) as c:
        victim = c.post("/v1/comparisons", json={"example": "tiny_conv_net", "options": {**FAST, "seed": 11}}).json()
        deadline = time.monotonic() + 60
        while (job := c.get(victim["links"]["self"]).json())["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(real_server.worker_pids()[0], signal.SIGKILL)
        job = real_server.wait_job(victim["id"], 60)
        assert job["status"] == "failed"
        assert job["error"]["code"] == "worker_died"
        assert job["error"]["detail"].startswith("worker died (SIGKILL) ")
        assert c.get("/healthz").status_code == 200
        nxt = c.post("/v1/comparisons", params={"wait": 300},
                     json={"example": "conv_relu", "options": {**FAST, "seed": 12}}).json()
        assert nxt["status"] == "succeeded", nxt["error"]


def test_nothing_is_written_outside_the_job_folders(real_server, conv_relu_job):
    # Runs after the upload test: quant_pre_process's symbolic shape inference writes temp files
    # to the current directory, which for a worker is the job's folder.
    stray = [p.name for p in real_server.cwd.iterdir() if p.name != "var" and not p.name.startswith("server-")]
    assert stray == []
