"""The container image, built and run: `make image-test` (not `make test`: ~3.5 min cold).

From nothing on a Debian host: podman + runc + mmdebstrap (make image-deps), a bookworm minbase made
with mmdebstrap and imported, the image built from docker/Dockerfile (docker/build-image.sh). Then
the image runs with its published port on loopback: /healthz answers, the built-in example is
submitted over HTTP and succeeds inside the container, and a downloaded artifact has the sha256
its report states. HEALTHCHECK survives the build (``--format docker``).

The fixture's one trick: the build trusts this machine's CA store (a TLS-intercepting proxy between
the build and PyPI) through a local layer on top of the base (BASE_CA); the Dockerfile never sees it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("IMAGE", "quantcompare")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
FAST = {"calibration_samples": 4, "eval_samples": 2, "latency": {"enabled": False}}

pytestmark = pytest.mark.skipif(os.environ.get("QUANTCOMPARE_IMAGE_TEST") != "1",
                                reason="builds and runs the container image: make image-test")


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": str(REPO / "docker" / "containers.conf")}
    return subprocess.run(["podman", *args], env=env, check=check, capture_output=True, text=True, timeout=timeout)




@pytest.fixture(scope="module")
def image() -> dict:
    assert shutil.which("podman") and shutil.which("mmdebstrap"), "make image-deps installs podman and mmdebstrap"
    env = {**os.environ, "IMAGE": IMAGE, "CONTAINERS_CONF": str(REPO / "docker" / "containers.conf")}
    if HOST_CA.is_file():
        env["BASE_CA"] = str(HOST_CA)
    started = time.monotonic()
    build = subprocess.run([str(REPO / "docker" / "build-image.sh")], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=1800)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    info = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
    return {"info": info, "build_s": time.monotonic() - started}


@pytest.fixture(scope="module")
def container(image):
    port, name = free_port(), f"quantcompare-test-{uuid.uuid4().hex[:8]}"
    podman("run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:8000", "-e", "QUANTCOMPARE_WORKERS=1", IMAGE)
    base = f"http://127.0.0.1:{port}"
    started, deadline = time.monotonic(), time.monotonic() + 120
    try:
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the container never answered /healthz:\n" + podman("logs", name, check=False).stdout[-3000:])
            time.sleep(0.2)
        yield {"base": base, "name": name, "healthz_s": time.monotonic() - started}
    finally:
        podman("rm", "-f", "-t", "2", name, check=False)


def test_the_image_keeps_its_healthcheck_runs_as_non_root_and_leaves_the_venv_out(image):
    config = image["info"]["Config"]
    assert "/healthz" in " ".join(image["info"]["Healthcheck"]["Test"])  # kept: built with --format docker
    assert config["User"] not in ("", "root", "0")
    assert config["Cmd"] == ["quantcompare", "serve", "--host", "0.0.0.0", "--port", "8000"]
    listing = podman("run", "--rm", IMAGE, "sh", "-c", "ls -a /app; python -c 'import torch; print(torch.__version__)'").stdout
    assert ".venv" not in listing and "tests" not in listing.split()  # .dockerignore: only what the build needs
    assert listing.strip().splitlines()[-1] == "2.13.0+cpu"


def test_the_container_answers_and_runs_the_example_and_serves_its_files(image, container):
    print(f"\nbuild {image['build_s']:.0f} s; /healthz answered {container['healthz_s']:.1f} s after the start")
    with httpx.Client(base_url=container["base"], timeout=400) as c:
        assert c.get("/readyz").json()["status"] == "ready"
        r = c.post("/v1/comparisons", params={"wait": 300}, json={"example": "conv_relu", "options": FAST})
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] == "succeeded", job.get("error")
        artifact = job["report"]["artifacts"]["ort_qdq"]["file"]
        got = c.get(f"/v1/comparisons/{job['id']}/artifacts/{artifact['path']}")
        assert got.status_code == 200
        assert hashlib.sha256(got.content).hexdigest() == artifact["sha256"]
