"""The HTTP edge as an attacker or a careless client meets it (issue 44), on a real server on loopback.

Raw sockets, because what is tested is what arrives on the wire: a form cut on its way (a proxy's
limit, a dropped connection), a connection that sends nothing, a request line that does not parse,
a JSON body shorter than its Content-Length. Jobs are fault_jobs commands (no toolchain), except for
the log test, which runs a real job on a model whose names carry newlines and ANSI escapes.
"""

from __future__ import annotations

import io
import json
import re
import socket
import time
import zipfile

import httpx
import pytest
from live_server import LiveServer

PROBLEM = "application/problem+json"
TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = LiveServer(tmp_path_factory.mktemp("edge") / "var", workers=1, header_timeout_s=TIMEOUT_S,
                   upload_idle_timeout_s=TIMEOUT_S, upload_min_kib_s=0, retention_hours=0).start()
    yield s
    s.stop()


def exchange(port: int, data: bytes, *, half_close: bool = False, wait: float = 10.0) -> tuple[int, dict, bytes]:
    """Send ``data``, optionally half-close (FIN: 'I sent all I will'), read the answer until the server
    closes or the answer is complete: (status, headers, body); status 0 when nothing came."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        s.settimeout(wait)
        raw = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            raw += chunk
            head, sep, body = raw.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if sep and length and len(body) >= int(length.group(1)):
                break
    finally:
        s.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head:
        return 0, {}, b""
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:]))
    return int(lines[0].split()[1]), headers, body


def problem_code(status: int, headers: dict, body: bytes) -> str:
    assert headers.get("content-type", "").startswith(PROBLEM), (status, headers, body[:300])
    problem = json.loads(body)
    assert problem["status"] == status and problem["detail"] and problem["type"].endswith(problem["code"])
    return problem["code"]


# -- a form cut on its way ---------------------------------------------------------------------
MODEL_PART = b'--bnd\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\nok\r\n'
OPTIONS = b'--bnd\r\nContent-Disposition: form-data; name="options"\r\n\r\n{"seed": 11, "artifacts": ["ort_qdq"]}\r\n'
CALIBRATION = b'--bnd\r\nContent-Disposition: form-data; name="calibration"; filename="c.npz"\r\n\r\n' + b"PK\x03\x04" + b"c" * 4000 + b"\r\n"
WHOLE = MODEL_PART + OPTIONS + CALIBRATION + b"--bnd--\r\n"
CUTS = {
    # the options part cut right after its headers: the job ran with default options, not seed 11 and [ort_qdq]
    "inside the options part": MODEL_PART + OPTIONS[:OPTIONS.index(b"\r\n\r\n") + 4],
    # the calibration part cut mid-file: the job ran on the half .npz (or generated samples)
    "inside the calibration part": MODEL_PART + OPTIONS + CALIBRATION[:2000],
}
HEAD = b"POST /v1/comparisons HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=bnd\r\n"


def _framed(framing: str, body: bytes) -> tuple[bytes, bool]:
    if framing == "content-length of what arrived":  # a proxy that re-framed the cut body
        return HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body, False
    if framing == "content-length of the whole form, then FIN":  # the client's side closed mid-body
        return HEAD + b"Content-Length: %d\r\n\r\n" % len(WHOLE) + body, True
    assert framing == "chunked, ended early"
    return HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", False


def _jobs(server) -> set[str]:
    return {p.name for p in (server.data_dir / "jobs").iterdir()}


@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize("framing", ["content-length of what arrived", "content-length of the whole form, then FIN",
                                     "chunked, ended early"])
def test_a_form_cut_short_is_refused_and_nothing_runs(server, framing, cut):
    before = _jobs(server)
    data, half_close = _framed(framing, CUTS[cut])
    status, headers, body = exchange(server.port, data, half_close=half_close)
    assert status == 400, (status, body[:400])
    assert problem_code(status, headers, body) == "incomplete_upload"
    assert _jobs(server) == before  # no job was made of what arrived
    assert not any((server.data_dir / "tmp").iterdir())
    # the same form, whole, is taken
    status, _, body = exchange(server.port, HEAD + b"Content-Length: %d\r\n\r\n" % len(WHOLE) + WHOLE)
    assert status in (200, 202), body[:300]


# -- the request head and body, timed -------------------------------------------------------------
@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"], ids=["nothing", "half the headers"])
def test_a_connection_that_sends_no_whole_request_head_gets_408_and_is_closed(server, sent):
    t0 = time.monotonic()
    status, headers, body = exchange(server.port, sent, wait=10 * TIMEOUT_S)
    assert status == 408, (status, body[:300])
    assert problem_code(status, headers, body) == "header_timeout"
    assert headers.get("connection") == "close" and time.monotonic() - t0 < 5 * TIMEOUT_S


def test_a_json_body_shorter_than_its_content_length_is_not_waited_for(server):
    body = b'{"example": "conv_relu", "options": {}}'
    request = (b"POST /v1/comparisons HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % (len(body) + 100) + body)
    t0 = time.monotonic()
    status, headers, answer = exchange(server.port, request, wait=10 * TIMEOUT_S)  # then stays silent
    assert status == 408 and problem_code(status, headers, answer) == "upload_too_slow", (status, answer[:300])
    assert time.monotonic() - t0 < 5 * TIMEOUT_S
    status, headers, answer = exchange(server.port, request, half_close=True)  # or says it is done
    assert status == 400 and problem_code(status, headers, answer) == "incomplete_upload", (status, answer[:300])


# -- answers outside the routes are problems too ------------------------------------------------------
@pytest.mark.parametrize("request_bytes", [b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n", b"NOT HTTP AT ALL\r\n\r\n",
                                           b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"],
                         ids=["a control character in the target", "not HTTP", "a header without a colon"])
def test_a_request_the_http_layer_cannot_parse_gets_a_problem(server, request_bytes):
    status, headers, body = exchange(server.port, request_bytes)
    assert status == 400 and problem_code(status, headers, body) == "invalid_request", (status, body[:300])


def test_unknown_routes_and_methods_are_problems(server):
    with server.client() as c:
        r = c.put("/v1/comparisons")
        assert r.status_code == 405 and r.headers["content-type"].startswith(PROBLEM)
        assert r.json()["code"] == "method_not_allowed" and "POST" in r.headers["allow"]
        r = c.get("/redoc")  # FastAPI's ReDoc page (CDN scripts) is off
        assert r.status_code == 404 and r.json()["code"] == "not_found"


# -- what the server echoes and what its pages may load -------------------------------------------------
def test_an_unknown_example_name_is_echoed_cut_short(server):
    with server.client() as c:
        r = c.post("/v1/comparisons", json={"example": "x" * 200_000})
        assert r.status_code == 422 and r.json()["code"] == "invalid_options"
        assert len(r.content) < 2000 and "200000 characters" in r.json()["detail"]
        r = c.post("/v1/comparisons", json={"example": "conv_relu", "options": {"k" * 100_000: 1}})
        assert r.status_code == 422 and len(r.content) < 3000, len(r.content)


def _external(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*["']?\s*((?:https?:)?//[^"'\s>]+)""", html, flags=re.I)


def test_no_page_loads_anything_from_elsewhere_and_each_says_so_in_its_csp(server):
    with server.client() as c:
        job = c.post("/v1/comparisons", params={"wait": 20}, files={"model": ("m.onnx", b"ok")},
                     data={"options": json.dumps({"seed": 77})}).json()
        page = c.get(job["links"]["report_html"])
        assert page.status_code == 200 and _external(page.text) == []
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp  # no script at all
        docs = c.get("/docs")
        assert docs.status_code == 200 and _external(docs.text) == []
        assert "default-src 'self'" in docs.headers["content-security-policy"]
        for src in re.findall(r'(?:src|href)="(/docs/[^"]+)"', docs.text):
            asset = c.get(src)
            assert asset.status_code == 200 and len(asset.content) > 100, src
        assert "SwaggerUIBundle" in c.get("/docs/swagger-ui-bundle.js").text
        assert c.get("/docs/../openapi.json").status_code in (200, 404)  # never a file outside the bundle
        assert c.get("/docs/index.html").status_code == 404


# -- logs a request or a model cannot forge ----------------------------------------------------------
FORGED = "2026-01-01 00:00:00,000 quantcompare.api ERROR forged by the model"
EVIL_INPUT = "x\n" + FORGED + "\x1b[2J\x1b[31m\r\x85\u2028"
EVIL_DIM = "batch\n" + FORGED + "\x1b]0;title\x07"
EVENT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (worker\[\d+\] )?[\w.]+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _evil_archive() -> bytes:
    """A .zip holding a model whose input and dim names carry a fake log line and ANSI escapes. An
    archive is checked in the worker, not the API: its refusal names them in the job's error, which
    the server logs."""
    from tests import models

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("net.onnx", models.build("relu", x=EVIL_INPUT, shape=[EVIL_DIM, 4]).SerializeToString())
    return buf.getvalue()


def test_a_model_cannot_forge_a_log_line(tmp_path):
    s = LiveServer(tmp_path / "var", fault_jobs=False, workers=1, worker_preload="", job_timeout_s=120).start()
    try:
        with s.client(timeout=150) as c:
            r = c.post("/v1/comparisons", params={"wait": 120}, files={"model": ("m\n\x1b[2J.zip", _evil_archive())},
                       data={"options": json.dumps({"calibration_samples": 4, "eval_samples": 2})})
            job = r.json()
            assert job["status"] == "failed" and job["error"]["code"] == "input_shape_required", r.text[:500]
            assert EVIL_INPUT in job["error"]["detail"]  # the API still says exactly which name
            c.get("/v1/comparisons/%0A" + FORGED.replace(" ", "%20") + "%1B%5B2J")
    finally:
        s.stop()
    log = s.log()
    assert "\x1b" not in log and "\x85" not in log and "\u2028" not in log and "\r" not in log
    lines = log.splitlines()
    assert [ln for ln in lines if not EVENT.match(ln)] == []  # one line per event: nothing else starts a line
    assert not any(ln.startswith(FORGED) for ln in lines)
    failed = [ln for ln in lines if f"job {job['id']} failed" in ln]
    assert len(failed) == 1 and "\\n" + FORGED + "\\x1b[2J" in failed[0], failed


def test_both_log_formats_keep_one_event_on_one_line():
    import logging

    from service.log_format import JsonFormatter, TextFormatter

    try:
        raise ValueError("bad input " + EVIL_INPUT)
    except ValueError:
        record = logging.LogRecord("quantcompare.pool", logging.INFO, __file__, 1, "job %s failed (%s)",
                                   ("abc", EVIL_DIM), exc_info=__import__("sys").exc_info())
    text = TextFormatter("%(name)s %(levelname)s %(message)s").format(record)
    assert "\n" not in text and "\x1b" not in text and "\\n" + FORGED in text and "Traceback" in text
    line = JsonFormatter(role="api").format(record)
    assert "\n" not in line and line.isascii()
    event = json.loads(line)
    assert (event["level"], event["logger"], event["role"]) == ("INFO", "quantcompare.pool", "api")
    assert event["message"] == "job abc failed (batch\\n" + FORGED + "\\x1b]0;title\\x07)"
    assert "ValueError: bad input x\\n" + FORGED in event["exception"]
