"""The Python client against a transport that answers like our API (see client_fakes.FakeServer)."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import pytest
from client_fakes import FakeServer, job_json, problem_response, report_json

import quantcompare_client as qc

pytestmark = pytest.mark.usefixtures("fast_polls")


def client_for(server: FakeServer, **kw) -> qc.Client:
    return qc.Client("http://qc.test", transport=httpx.MockTransport(server.handler), **kw)


def test_compare_an_example_name_sends_a_json_body_and_polls_to_a_report(fake_server):
    seen = []
    with client_for(fake_server) as client:
        report = client.compare("conv_relu", options={"levels": ["all"]}, progress=seen.append)
    post = fake_server.requests[0]
    assert post.method == "POST" and post.url.params["wait"] == "2"
    assert json.loads(post.content) == {"example": "conv_relu", "options": {"levels": ["all"]}}
    assert [j.status for j in seen] == ["queued", "running", "running", "running"]
    assert [str(j.progress) for j in seen[1:]] == ["fp32 1/4", "quantize 2/4", "inspect 3/4"]
    assert isinstance(report, qc.Report) and report.id == "c0ffee"


def test_compare_a_path_uploads_multipart_with_options_and_calibration(fake_server, tmp_path):
    model = tmp_path / "net.onnx"
    model.write_bytes(b"\x08\x07onnx")
    calib = tmp_path / "calib.npz"
    calib.write_bytes(b"PK\x03\x04npz")
    with client_for(fake_server) as client:
        client.compare(str(model), options='{"seed": 3}', calibration=calib, progress=False)
    body = fake_server.requests[0].content
    assert b'name="model"; filename="net.onnx"' in body and b"\x08\x07onnx" in body
    assert b'name="calibration"; filename="calib.npz"' in body
    assert b'name="options"' in body and b'{"seed": 3}' in body


@pytest.mark.parametrize("payload, filename", [(b"\x08\x07onnx", "model.onnx"), (b"PK\x03\x04zip", "model.pt2")],
                         ids=["onnx bytes are named .onnx", "zip bytes are named .pt2"])
def test_compare_bytes_uploads_them_with_a_sniffed_name(fake_server, payload, filename):
    with client_for(fake_server) as client:
        client.compare(payload, progress=False)
    assert f'filename="{filename}"'.encode() in fake_server.requests[0].content


def test_compare_a_file_object_uploads_it(fake_server):
    with client_for(fake_server) as client:
        client.compare(io.BytesIO(b"\x08\x07onnx"), filename="mine.onnx", progress=False)
    assert b'filename="mine.onnx"' in fake_server.requests[0].content


@pytest.mark.parametrize("model", ["missing.onnx", "some/dir/net", "net.pt2"])
def test_a_string_that_looks_like_a_path_but_is_missing_is_not_sent_as_an_example(fake_server, model):
    with client_for(fake_server) as client, pytest.raises(FileNotFoundError, match="model file not found"):
        client.compare(model)
    assert fake_server.requests == []


def test_calibration_with_an_example_is_refused_before_sending(fake_server):
    with client_for(fake_server) as client, pytest.raises(ValueError, match="calibration"):
        client.compare("conv_relu", calibration=b"x")


def test_wait_false_returns_the_queued_job(fake_server):
    with client_for(fake_server) as client:
        job = client.compare("conv_relu", wait=False)
        assert isinstance(job, qc.Job) and job.status == "queued" and not job.done
        assert "wait" not in fake_server.requests[0].url.params
        report = client.wait(job.id, progress=False)
    assert report.verdict.passed


def test_a_failed_job_raises_comparison_failed_with_the_problem(fake_server):
    fake_server.fail_with = {"type": "urn:quantcompare:problem:invalid_model", "title": "Invalid model", "status": 422,
                             "detail": "the upload is not an ONNX model", "code": "invalid_model",
                             "hint": "export with torch.onnx.export"}
    with client_for(fake_server) as client, pytest.raises(qc.ComparisonFailed) as e:
        client.compare(b"junk", progress=False)
    assert e.value.code == "invalid_model" and e.value.job_id == "c0ffee"
    assert "invalid_model: the upload is not an ONNX model" in str(e.value)
    assert "hint: export with torch.onnx.export" in str(e.value)


@pytest.mark.parametrize(
    "status, code, cls",
    [(400, "invalid_options", qc.InvalidRequest), (422, "invalid_model", qc.InvalidRequest),
     (401, "unauthorized", qc.Unauthorized), (404, "not_found", qc.NotFound),
     (413, "payload_too_large", qc.PayloadTooLarge), (429, "busy", qc.Busy), (500, "internal", qc.ServerError)],
    ids=lambda v: str(v) if isinstance(v, (int, str)) else v.__name__,
)
def test_problem_json_maps_onto_the_error_tree(status, code, cls):
    transport = httpx.MockTransport(
        lambda r: problem_response(status, code, "what happened", hint="what to do", **{"Retry-After": "0"}))
    with qc.Client("http://qc.test", transport=transport) as client, pytest.raises(cls) as e:
        client.get("abc")
    err = e.value
    assert isinstance(err, qc.APIError) and isinstance(err, qc.QuantCompareError)
    assert (err.status, err.code, err.message, err.hint) == (status, code, "what happened", "what to do")
    assert err.url == "http://qc.test/v1/comparisons/abc"
    assert f"{code}: what happened (HTTP {status} from http://qc.test/v1/comparisons/abc)" in str(err)


def test_a_non_problem_error_body_still_gives_a_message():
    transport = httpx.MockTransport(lambda r: httpx.Response(502, text="<html>Bad Gateway</html>"))
    with qc.Client("http://qc.test", transport=transport) as client, pytest.raises(qc.ServerError) as e:
        client.versions()
    assert e.value.code is None and "Bad Gateway" in e.value.message


def test_busy_is_retried_after_retry_after(fake_server):
    fake_server.busy_first = 2
    with client_for(fake_server) as client:
        report = client.compare(b"\x08\x07onnx", progress=False)
    posts = [r for r in fake_server.requests if r.method == "POST"]
    assert len(posts) == 3 and report.id == "c0ffee"


def test_connection_refused_names_the_url():
    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with qc.Client("http://qc.test:9", transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(qc.ConnectError, match=r"cannot reach quantcompare at http://qc.test:9/v1/examples"):
            client.examples()
        assert client.health() is False


def test_timeouts_name_the_url():
    def slow(request):
        raise httpx.ReadTimeout("timed out", request=request)

    with qc.Client("http://qc.test", transport=httpx.MockTransport(slow)) as client:
        with pytest.raises(qc.Timeout, match=r"GET http://qc.test/v1/comparisons/x timed out") as e:
            client.get("x")
    assert isinstance(e.value, qc.TransportError) and e.value.url == "http://qc.test/v1/comparisons/x"


def test_max_wait_raises_wait_timeout_with_the_job_url(fake_server):
    fake_server.steps = 10_000
    with client_for(fake_server) as client, pytest.raises(qc.WaitTimeout) as e:
        client.compare("conv_relu", progress=False, max_wait=0)
    assert e.value.job_id == "c0ffee" and e.value.url == "http://qc.test/v1/comparisons/c0ffee"


def test_the_token_is_sent_as_a_bearer_header(fake_server):
    fake_server.token = "s3cret"
    with client_for(fake_server) as client, pytest.raises(qc.Unauthorized):
        client.examples()
    with client_for(fake_server, token="s3cret") as client:
        assert [e.name for e in client.examples()] == ["conv_relu"]


def test_examples_versions_artifacts_and_html(fake_server):
    with client_for(fake_server) as client:
        assert client.examples()[0] == qc.Example("conv_relu", "Conv + ReLU")
        assert client.versions()["versions"]["onnxruntime"] == "1.32.0"
        links = client.artifacts("c0ffee")
        assert [(a.name, a.level) for a in links] == [("ort_qdq.onnx", None), ("ort_qdq.all.onnx", "all")]
        assert "report" in client.report_html("c0ffee")
        assert client.health() is True


@pytest.mark.parametrize(
    "args, kwargs, saved",
    [(("ort_qdq.all.onnx",), {}, "ort_qdq.all.onnx"), (("ort_qdq",), {"level": "all"}, "ort_qdq.all.onnx"),
     (("ort_qdq",), {}, "ort_qdq.onnx")],
    ids=["by file name", "by artifact and level", "the file as written"],
)
def test_download_saves_into_a_folder(fake_server, tmp_path, args, kwargs, saved):
    with client_for(fake_server) as client:
        path = client.download("c0ffee", *args, tmp_path, **kwargs)
    assert path == tmp_path / saved and path.read_bytes() == fake_server.artifact_bytes
    assert not list(tmp_path.glob("*.part"))


def test_download_to_a_file_path_and_a_missing_artifact(fake_server, tmp_path):
    with client_for(fake_server) as client:
        assert client.download("c0ffee", "ort_qdq.onnx", tmp_path / "sub" / "q.onnx").read_bytes()
        with pytest.raises(qc.NotFound):
            client.download("c0ffee", "pt2e_qdq.onnx", tmp_path)
        with pytest.raises(ValueError):
            client.download("c0ffee", "../etc/passwd", tmp_path)
    assert not (tmp_path / "pt2e_qdq.onnx").exists()


def test_the_async_twin_does_the_same(fake_server, tmp_path):
    async def main():
        transport = httpx.MockTransport(fake_server.handler)
        async with qc.AsyncClient("http://qc.test", transport=transport) as client:
            report = await client.compare("conv_relu", progress=False)
            job = await client.get(report.id)
            path = await client.download(report.id, "ort_qdq.all.onnx", tmp_path)
            examples = await client.examples()
            return report, job, path, examples

    report, job, path, examples = asyncio.run(main())
    assert report.id == "c0ffee" and job.status == "succeeded" and job.report is not None
    assert path.read_bytes() == fake_server.artifact_bytes and examples[0].name == "conv_relu"


def test_progress_on_a_pipe_prints_one_line_per_stage(fake_server, monkeypatch, capsys):
    with client_for(fake_server) as client:
        client.compare("conv_relu", progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("quantcompare c0ffee: queued")
    assert any("running · fp32 1/4" in line for line in err)
    assert err[-1].startswith("quantcompare c0ffee: succeeded")


def test_progress_in_a_notebook_updates_one_display(fake_server, monkeypatch):
    import quantcompare_client._progress as progress_mod

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", obj))

    def display(obj, display_id=False):
        shown.append(("display", obj))
        return Handle()

    monkeypatch.setattr(progress_mod, "_notebook_display", lambda: (display, lambda html: html))
    with client_for(fake_server) as client:
        client.compare("conv_relu")
    assert [kind for kind, _ in shown].count("display") == 1
    assert '<progress value="1" max="4"' in shown[1][1]
    assert "succeeded" in shown[-1][1]


def test_a_job_that_succeeds_already_in_the_post_needs_no_poll():
    def handler(request):
        return httpx.Response(200, json=job_json("c0ffee", "succeeded", report=report_json(), cached=True))

    with qc.Client("http://qc.test", transport=httpx.MockTransport(handler)) as client:
        assert client.compare("conv_relu").id == "c0ffee"


def test_base_url_must_be_http():
    with pytest.raises(ValueError, match="http"):
        qc.Client("127.0.0.1:8000")


def test_progress_on_a_terminal_rewrites_one_line(fake_server):
    import quantcompare_client._progress as progress_mod

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    reporter = progress_mod.reporter_from_arg(None, stream=stream)
    with client_for(fake_server) as client:
        job = client.compare("conv_relu", wait=False)
        reporter.update(job)
        reporter.update(client.get(job.id))
        reporter.close(client.wait(job.id, progress=False) and client.get(job.id))
    text = stream.getvalue()
    assert text.count("\r\x1b[K") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "running · fp32 1/4" in text and "succeeded" in text.splitlines()[-1]


def test_progress_is_silent_when_nobody_watches():
    import quantcompare_client._progress as progress_mod

    stream = io.StringIO()  # not a TTY, no notebook
    reporter = progress_mod.reporter_from_arg(None, stream=stream)
    reporter.update(qc.Job.from_dict(job_json("c0ffee", "running", stage="fp32", done=1, total=4)))
    reporter.close(None)
    assert stream.getvalue() == ""


@pytest.mark.parametrize("status, stopped", [(204, True), (202, False)], ids=["the last submitter", "others joined"])
def test_cancel_sends_delete_and_says_whether_the_job_stopped(status, stopped):
    seen = []

    def handler(request):
        seen.append((request.method, request.url.path))
        return httpx.Response(status, json={"id": "abc", "status": "running"} if status == 202 else None)

    with qc.Client("http://qc.test", transport=httpx.MockTransport(handler)) as client:
        assert client.cancel("abc") is stopped

    async def cancel_async():
        async with qc.AsyncClient("http://qc.test", transport=httpx.MockTransport(handler)) as client:
            return await client.cancel("abc")

    assert asyncio.run(cancel_async()) is stopped
    assert seen == [("DELETE", "/v1/comparisons/abc")] * 2


def test_cancel_of_an_unknown_job_raises_not_found():
    transport = httpx.MockTransport(lambda r: problem_response(404, "not_found", "no comparison with id 'x'"))
    with qc.Client("http://qc.test", transport=transport) as client, pytest.raises(qc.NotFound):
        client.cancel("x")
