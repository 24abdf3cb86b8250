"""Fixtures for the client tests; the fakes and the live-server helpers are in ``client_fakes``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from client_fakes import REPO, SERVER_START_TIMEOUT_S, FakeServer, LiveServer, free_port


@pytest.fixture
def fake_server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def fast_polls(monkeypatch):
    """Poll without sleeping: the fake answers at once."""
    import quantcompare_client._client as client_mod

    monkeypatch.setattr(client_mod, "_poll_delays", lambda: iter(lambda: 0.0, None))


@pytest.fixture(scope="session")
def live_server(tmp_path_factory) -> LiveServer:
    """``quantcompare serve`` on a free loopback port with one warm worker and its own data dir."""
    data_dir = tmp_path_factory.mktemp("qc-client-server")
    port = free_port()
    log = data_dir / "server.log"
    env = {**os.environ, "QUANTCOMPARE_DATA_DIR": str(data_dir), "QUANTCOMPARE_WORKERS": "1",
           "QUANTCOMPARE_LOG_LEVEL": "warning"}
    env.pop("QUANTCOMPARE_API_TOKEN", None)
    cli = Path(sys.executable).with_name("quantcompare")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(cli), "serve", "--host", "127.0.0.1", "--port", str(port)], cwd=REPO, env=env,
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"quantcompare serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"quantcompare serve did not answer /healthz in {SERVER_START_TIMEOUT_S}s:\n"
                            f"{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield LiveServer(url, data_dir, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this fixture created (start_new_session)
            proc.wait(timeout=10)
