"""A stalled or trickling upload loses its upload slot (slowloris): with one slot, a client that
sends half a body and then nothing, or a byte now and then, turned every other upload away with
429 for as long as it kept the connection open."""
from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from live_server import LiveServer  # noqa: E402

IDLE_S = 1.0


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory):
    s = LiveServer(tmp_path_factory.mktemp("slow") / "var", workers=1, max_concurrent_uploads=1,
                   upload_idle_timeout_s=IDLE_S, upload_min_kib_s=64).start()
    yield s
    s.stop()


def _open_upload(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/comparisons HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: multipart/form-data; boundary=bnd\r\nContent-Length: 10000000\r\n\r\n"
              b'--bnd\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n' + b"o" * 1000)
    return s


def _response(s: socket.socket, timeout: float) -> bytes:
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data or b"}" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data


def _slot_is_free(server) -> bool:
    r = httpx.post(server.base_url + "/v1/comparisons", files={"model": ("m.onnx", b"\x08\x07")}, timeout=10)
    return r.status_code != 429


def test_a_stalled_upload_is_dropped_with_408_and_frees_its_slot(one_slot):
    s = _open_upload(one_slot.port)
    time.sleep(0.3)
    assert not _slot_is_free(one_slot)  # it holds the only slot while it streams
    t0 = time.monotonic()
    raw = _response(s, 10 * IDLE_S)
    s.close()
    assert raw.startswith(b"HTTP/1.1 408"), raw[:300]
    assert b'"upload_too_slow"' in raw and time.monotonic() - t0 < 5 * IDLE_S
    assert _slot_is_free(one_slot)
    assert not any((one_slot.data_dir / "tmp").iterdir())  # nothing of the half body kept


def test_a_trickling_upload_is_dropped_below_the_minimum_rate(one_slot):
    s = _open_upload(one_slot.port)
    t0 = time.monotonic()
    raw = b""
    while time.monotonic() - t0 < 10 * IDLE_S:  # one byte every half idle timeout: never idle, always slow
        try:
            s.sendall(b"o")
        except (BrokenPipeError, ConnectionResetError):
            break
        raw = _response(s, IDLE_S / 2)
        if raw:
            break
    s.close()
    assert raw.startswith(b"HTTP/1.1 408") and b"below the server's minimum" in raw, raw[:300]
    assert _slot_is_free(one_slot)
