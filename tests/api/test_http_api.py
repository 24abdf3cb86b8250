"""The HTTP API against a real server on loopback; jobs are fault_jobs commands (no toolchain)."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import psutil
import pytest
from live_server import LiveServer

from service.api.routes.comparisons import answer_status

PROBLEM = "application/problem+json"


def upload(client, command: str, options: dict | None = None, wait: float = 0, name: str = "net.onnx", **files):
    form = {"model": (name, command.encode(), "application/octet-stream")}
    form.update(files)
    data = {"options": json.dumps(options)} if options is not None else None
    return client.post("/v1/comparisons", params={"wait": wait} if wait else None, files=form, data=data)


def assert_problem(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["code"] == code and body["status"] == status and body["detail"] and body["type"].endswith(code)
    assert "Traceback" not in r.text and "/work/" not in r.text and "/tmp/" not in r.text
    return body


def test_healthz_answers_without_auth_or_workers(client):
    t = time.perf_counter()
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert time.perf_counter() - t < 1.0


def test_openapi_documents_every_route_and_the_full_report(client):
    doc = client.get("/openapi.json").json()
    paths = doc["paths"]
    for path in ("/v1/comparisons", "/v1/comparisons/{job_id}", "/v1/comparisons/{job_id}/artifacts",
                 "/v1/comparisons/{job_id}/artifacts/{name}", "/v1/comparisons/{job_id}/report.html",
                 "/v1/examples", "/v1/versions", "/healthz", "/metrics"):
        assert path in paths, path
    schemas = doc["components"]["schemas"]
    for name in ("Job", "Report", "Artifact", "QuantizationInventory", "OptimizedLevel", "Problem", "ArtifactList"):
        assert name in schemas, name
    body = paths["/v1/comparisons"]["post"]["requestBody"]["content"]
    assert {"multipart/form-data", "application/json"} <= set(body)
    assert "413" in paths["/v1/comparisons"]["post"]["responses"]


def test_submit_returns_202_with_location_then_the_job_finishes(server, client):
    r = upload(client, "ok 1")  # still running when the POST answers, so the status below is queued/running
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == job["links"]["self"] == f"/v1/comparisons/{job['id']}"
    assert job["status"] in ("queued", "running") and job["cached"] is False
    done = client.get(job["links"]["self"], params={"wait": 20}).json()
    assert done["status"] == "succeeded", done
    assert done["progress"] == {"stage": "optimize", "done": 3, "total": 3}
    assert done["report"]["id"] == job["id"] and done["started_at"] and done["finished_at"]


def test_a_new_job_without_wait_answers_202_even_when_it_finished_before_the_post_answered(client):
    """A client branches on 202 (poll the Location) vs 200 (the answer): without ?wait that must not
    depend on whether a worker finished (or refused) the job before the POST handler returned."""
    answers = [upload(client, "ok", {"seed": 5000 + i}) for i in range(6)]
    for r in answers:
        assert r.status_code == 202, r.text[:300]
        assert r.headers["location"] == r.json()["links"]["self"]
    # The race itself is rare on loopback (it was seen once in CI), so the decision is pinned too.
    assert answer_status(created=True, cached=False, waited=False, finished=True) == 202
    assert answer_status(created=True, cached=False, waited=True, finished=True) == 200
    assert answer_status(created=True, cached=False, waited=True, finished=False) == 202
    assert answer_status(created=True, cached=True, waited=False, finished=True) == 200
    assert answer_status(created=False, cached=False, waited=False, finished=False) == 200
    for r in answers:  # each still finishes, and a poll (not a new job) is a 200
        done = client.get(r.headers["location"], params={"wait": 20})
        assert done.status_code == 200 and done.json()["status"] == "succeeded", done.text[:300]


def test_wait_returns_200_with_the_report_and_the_same_input_is_cached(client):
    opts = {"seed": 7}
    first = upload(client, "ok", opts, wait=20)
    assert first.status_code == 200 and first.json()["status"] == "succeeded"
    t = time.perf_counter()
    again = upload(client, "ok", opts, wait=20)
    assert time.perf_counter() - t < 1.0
    assert again.status_code == 200
    assert again.json()["cached"] is True and again.json()["id"] == first.json()["id"]
    assert again.json()["report"] == first.json()["report"]
    # Defaults spelled out are the same options; another seed is another job.
    assert upload(client, "ok", {"seed": 7, "calibration_samples": 16}, wait=20).json()["cached"] is True
    other = upload(client, "ok", {"seed": 8}, wait=20).json()
    assert other["cached"] is False and other["id"] != first.json()["id"]


def test_a_segfaulting_job_fails_alone_and_the_service_goes_on(server, client):
    slow = upload(client, "sleep 2").json()
    crash = upload(client, "segv", wait=20).json()
    assert crash["status"] == "failed"
    assert crash["error"]["code"] == "worker_died"
    assert crash["error"]["detail"] == "worker died (SIGSEGV) during optimize"
    assert client.get("/healthz").status_code == 200
    assert server.wait_job(slow["id"])["status"] == "succeeded"
    assert upload(client, "ok", {"seed": 101}, wait=30).json()["status"] == "succeeded"


def test_killing_a_worker_mid_job_fails_only_that_job(server, client):
    victim = upload(client, "sleep 30").json()
    deadline = time.monotonic() + 20
    while client.get(f"/v1/comparisons/{victim['id']}").json()["progress"]["stage"] != "prepare":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int((server.data_dir / "jobs" / victim["id"] / "ran.txt").read_text())
    bystander = upload(client, "sleep 1").json()
    os.kill(pid, signal.SIGKILL)
    job = server.wait_job(victim["id"])
    assert job["status"] == "failed" and job["error"]["detail"] == "worker died (SIGKILL) during prepare"
    assert server.wait_job(bystander["id"])["status"] == "succeeded"
    assert upload(client, "ok", {"seed": 102}, wait=30).json()["status"] == "succeeded"


def test_a_job_past_the_time_limit_is_killed(client):
    job = upload(client, "sleep 60", wait=30).json()
    assert job["status"] == "failed" and job["error"]["code"] == "job_timeout"
    assert "time limit of 5 s during prepare" in job["error"]["detail"]
    assert "pt2e_qdq" not in job["error"]["hint"]
    quantizing = upload(client, "sleep 60 quantize", wait=30).json()
    assert "during quantize" in quantizing["error"]["detail"]
    assert "options.artifacts without pt2e_qdq" in quantizing["error"]["hint"]


def test_a_job_gives_the_pt2e_path_half_its_time_limit(server, client):
    """The server's share of its 5 s job limit travels in the job's spec (its RunLimits, config.py), so a
    slow PT2E path stops there and the ORT paths' results are reported (test_pt2e_time_limit.py)."""
    job = upload(client, "ok", {"seed": 161}, wait=30).json()
    spec = json.loads((server.data_dir / "jobs" / job["id"] / "job.json").read_text())
    assert spec["limits"]["pt2e_time_limit_s"] == 2.5


def test_user_errors_and_internal_errors_in_a_job(client):
    user = upload(client, "user_error", wait=20).json()
    assert user["error"]["code"] == "invalid_model" and user["error"]["status"] == 422
    bug = upload(client, "bug", wait=20).json()
    assert bug["error"]["code"] == "internal_error" and "/srv/secret" not in json.dumps(bug)


def test_artifacts_are_listed_and_downloaded_with_sensible_names(client):
    job = upload(client, "ok", {"seed": 103}, wait=20, name="../../etc/My Net!.onnx").json()
    listing = client.get(job["links"]["artifacts"]).json()["artifacts"]
    by_name = {a["name"]: a for a in listing}
    assert set(by_name) == {"fp32.onnx", "ort_qdq.onnx", "ort_qdq.all.onnx"}
    assert (by_name["ort_qdq.all.onnx"]["artifact"], by_name["ort_qdq.all.onnx"]["level"]) == ("ort_qdq", "all")
    assert by_name["fp32.onnx"]["level"] is None
    r = client.get(by_name["ort_qdq.all.onnx"]["url"])
    assert r.status_code == 200 and r.content == b"not really onnx: ort_qdq.all.onnx"
    assert f'filename="My_Net-{job["id"][:8]}.ort_qdq.all.onnx"' in r.headers["content-disposition"]
    assert r.headers["content-disposition"].startswith("attachment")
    for bad in ("..%2Fjob.json", "job.json", "..%2F..%2Fquantcompare.sqlite3", "%2Fetc%2Fpasswd"):
        assert client.get(f"{job['links']['artifacts']}/{bad}").status_code == 404


def test_report_page_renders_a_sparse_report_and_a_failed_job(client):
    ok = upload(client, "ok", {"seed": 104}, wait=20).json()
    page = client.get(ok["links"]["report_html"])
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "not available" in page.text and "At a glance" in page.text
    failed = upload(client, "segv", wait=20).json()
    page = client.get(failed["links"]["report_html"]).text
    assert "worker died (SIGSEGV) during optimize" in page
    running = upload(client, "sleep 3").json()
    assert 'http-equiv="refresh"' in client.get(running["links"]["report_html"]).text


@pytest.mark.parametrize(
    "case, send, status, code",
    [
        ("no model field", dict(files={"options": (None, "{}")}), 400, "invalid_request"),
        ("an unexpected field", dict(files={"model": ("a.onnx", b"ok"), "evil": ("x", b"1")}), 400, "invalid_request"),
        ("an empty model", dict(files={"model": ("a.onnx", b"")}), 422, "invalid_model"),
        ("options that are not JSON", dict(files={"model": ("a.onnx", b"ok"), "options": (None, "{nope")}), 422, "invalid_options"),
        ("an unknown option", dict(files={"model": ("a.onnx", b"ok"), "options": (None, '{"calibraton_samples": 3}')}), 422, "invalid_options"),
        ("an option out of range", dict(files={"model": ("a.onnx", b"ok"), "options": (None, '{"calibration_samples": 0}')}), 422, "invalid_options"),
        ("a broken multipart body", dict(content=b"--xx\r\ngarbage\r\n\r\n", headers={"content-type": "multipart/form-data; boundary=xx"}), 400, "invalid_request"),
        ("a form that ends before its closing boundary", dict(content=b"--xx\r\ngarbage", headers={"content-type": "multipart/form-data; boundary=xx"}), 400, "incomplete_upload"),
        ("multipart without a boundary", dict(content=b"x", headers={"content-type": "multipart/form-data"}), 400, "invalid_request"),
        ("an unknown example", dict(json={"example": "nope"}), 422, "invalid_options"),
        ("a JSON body with extra keys", dict(json={"example": "conv_relu", "model": "x"}), 422, "invalid_request"),
        ("a JSON body that is not JSON", dict(content=b"{", headers={"content-type": "application/json"}), 400, "invalid_request"),
        ("plain text", dict(content=b"hi", headers={"content-type": "text/plain"}), 415, "invalid_request"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_requests_get_a_problem_with_a_stable_code(client, case, send, status, code):
    assert_problem(client.post("/v1/comparisons", **send), status, code)


@pytest.mark.parametrize("entries, named", [
    ({"ep.context_file_path": "/tmp/x.onnx"}, "ep.context_file_path"),
    ({"session.optimized_model_external_initializers_file_name": "x.data"}, "session.optimized_model_external"),
    ({"session.qdqisint8allowed": "2"}, "session.qdqisint8allowed=2"),
], ids=["a file-writing entry", "another file-writing entry", "a value ORT reads as false"])
def test_an_ort_session_entry_outside_the_allow_list_is_refused(client, entries, named):
    """options.ort_session reaches ORT's SessionOptions: a key other than those advice emits (or a value other
    than "0"/"1") is refused before anything runs, with the keys that are allowed."""
    body = assert_problem(client.post("/v1/comparisons", json={"example": "conv_relu",
                                                               "options": {"ort_session": entries}}),
                          422, "invalid_options")
    assert named in body["detail"] and 'session.qdqisint8allowed ("0" or "1")' in body["detail"]


def test_unknown_things_are_404_problems(client):
    assert_problem(client.get("/v1/comparisons/" + "0" * 32), 404, "not_found")
    assert_problem(client.get("/v1/comparisons/not-an-id/artifacts"), 404, "not_found")
    assert_problem(client.get("/nowhere"), 404, "not_found")
    assert_problem(client.delete("/healthz"), 405, "method_not_allowed")
    assert_problem(client.get("/v1/comparisons/" + "0" * 32, params={"wait": -1}), 422, "invalid_request")


def test_uploads_past_the_limit_get_413_and_leave_nothing(server, client):
    big = b"0" * (65 * 1024 * 1024)
    assert_problem(upload(client, big.decode()), 413, "payload_too_large")

    def chunks():  # no Content-Length: the limit must hold while streaming
        for _ in range(70):
            yield b"--b\r\n" if False else b"x" * (1024 * 1024)

    body = (b'--bnd\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n')

    def stream():
        yield body
        yield from chunks()
        yield b"\r\n--bnd--\r\n"

    try:
        r = client.post("/v1/comparisons", content=stream(), headers={"content-type": "multipart/form-data; boundary=bnd"})
        assert_problem(r, 413, "payload_too_large")
    except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
        pass  # the server answered 413 and closed while we were still sending: also a refusal
    time.sleep(0.3)
    assert not any((server.data_dir / "tmp").iterdir())


def test_the_api_process_memory_does_not_grow_with_upload_size(server, client):
    proc = psutil.Process(server.proc.pid)
    upload(client, "x" * (1024 * 1024))  # warm up the code path
    before = proc.memory_info().rss
    payload = b"sleep 0 " + b" " * (60 * 1024 * 1024)

    def stream():
        yield b'--bnd\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n'
        for i in range(0, len(payload), 1 << 20):
            yield payload[i:i + (1 << 20)]
        yield b"\r\n--bnd--\r\n"

    r = client.post("/v1/comparisons", content=stream(), headers={"content-type": "multipart/form-data; boundary=bnd"})
    assert r.status_code == 202, r.text
    grew_mb = (proc.memory_info().rss - before) / 2**20
    assert grew_mb < 20, f"API process grew {grew_mb:.0f} MiB for a 60 MiB upload"
    assert (server.data_dir / "jobs" / r.json()["id"] / "input" / "model.onnx").stat().st_size == len(payload)


def test_metrics_show_jobs_by_state_queue_and_stage_durations(client):
    upload(client, "ok", {"seed": 105}, wait=20)
    text = client.get("/metrics").text
    assert 'quantcompare_jobs{state="succeeded"}' in text
    assert "quantcompare_queue_length" in text
    assert 'quantcompare_stage_duration_seconds_count{stage="prepare"}' in text
    assert 'quantcompare_workers{state="idle"}' in text or 'quantcompare_workers{state="busy"}' in text
    assert 'quantcompare_worker_deaths_total' in text


def test_examples_and_versions(client):
    names = [e["name"] for e in client.get("/v1/examples").json()["examples"]]
    assert "conv_relu" in names
    v = client.get("/v1/versions").json()
    assert v["versions"]["onnxruntime"] and v["cpu"]["arch"] and v["python"]


# -- servers with their own settings ---------------------------------------------------------
def test_a_full_queue_answers_503_and_too_many_uploads_429(tmp_path):
    s = LiveServer(tmp_path / "var", workers=1, max_queue=1, max_concurrent_uploads=1).start()
    try:
        with s.client() as c:
            # Three different jobs (seeds): an identical one would join the first instead of queueing.
            assert upload(c, "sleep 3", {"seed": 1}).status_code == 202
            deadline = time.monotonic() + 10
            while c.get("/metrics").text.find('quantcompare_workers{state="busy"} 1.0') < 0:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert upload(c, "sleep 3", {"seed": 2}).status_code == 202  # queued
            r = upload(c, "sleep 3", {"seed": 3})
            assert_problem(r, 503, "busy")
            assert int(r.headers["retry-after"]) >= 1

            import threading

            started = threading.Event()

            def slow():
                yield b'--bnd\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n'
                started.set()
                time.sleep(1.5)
                yield b"ok\r\n--bnd--\r\n"

            t = threading.Thread(target=lambda: s.client().post(
                "/v1/comparisons", content=slow(), headers={"content-type": "multipart/form-data; boundary=bnd"}))
            t.start()
            started.wait(5)
            time.sleep(0.3)
            r = upload(c, "ok")
            assert_problem(r, 429, "busy")
            assert r.headers["retry-after"]
            t.join()
    finally:
        s.stop()


def test_an_api_token_guards_everything_but_healthz(tmp_path):
    s = LiveServer(tmp_path / "var", workers=1, api_token="s3cret").start()
    try:
        with s.client() as c:
            assert c.get("/healthz").status_code == 200
            # the docs too (issue 44: the README said every route, and /openapi.json, /docs, /redoc were open)
            for path in ("/v1/examples", "/v1/versions", "/metrics", "/v1/comparisons/" + "0" * 32,
                         "/openapi.json", "/docs", "/docs/swagger-ui.css"):
                r = c.get(path)
                assert_problem(r, 401, "unauthorized")
                assert r.headers["www-authenticate"].startswith("Bearer")
            assert_problem(c.get("/v1/examples", headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")
            token = {"Authorization": "Bearer s3cret"}
            assert c.get("/v1/examples", headers=token).status_code == 200
            assert "/v1/comparisons" in c.get("/openapi.json", headers=token).json()["paths"]
            assert c.get("/docs", headers=token).status_code == 200
            assert_problem(c.get("/redoc", headers=token), 404, "not_found")
    finally:
        s.stop()


def test_after_a_crash_and_restart_nothing_submitted_is_lost(tmp_path):
    s = LiveServer(tmp_path / "var", workers=1).start()
    with s.client() as c:
        running = upload(c, "sleep 2").json()
        queued = upload(c, "ok").json()
        deadline = time.monotonic() + 10
        while c.get(f"/v1/comparisons/{running['id']}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    workers = s.worker_pids()
    s.stop(signal.SIGKILL)  # no shutdown hooks: the workers die with it (PDEATHSIG)
    deadline = time.monotonic() + 5
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in workers):
        assert time.monotonic() < deadline, "workers outlived the killed server"
        time.sleep(0.05)
    (s.data_dir / "jobs" / "0123stale").mkdir()
    s2 = LiveServer(s.data_dir, workers=1)
    s2.start()
    try:
        assert s2.wait_job(running["id"], 30)["status"] == "succeeded"
        assert s2.wait_job(queued["id"], 30)["status"] == "succeeded"
        assert not (s.data_dir / "jobs" / "0123stale").exists()
    finally:
        s2.stop()


def test_identical_submissions_in_flight_join_one_job_instead_of_filling_the_queue(tmp_path):
    """A CI matrix posts the same model from several jobs at once: 120 submissions of 40 distinct
    jobs, in a shuffled burst, against a queue of 40. Every repeat of a job still queued or
    running gets 202 with that job's id (or, once it finished, the stored result); none a 503."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    s = LiveServer(tmp_path / "var", workers=2, max_queue=40, max_concurrent_uploads=200).start()
    try:
        order = [i for i in range(40) for _ in range(3)]
        random.Random(0).shuffle(order)

        def post(i: int) -> tuple[int, httpx.Response]:
            with s.client() as c:
                return i, upload(c, "sleep 1", {"seed": 1000 + i})

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, order))
        assert all(r.status_code in (200, 202) for _, r in answers), \
            sorted({(r.status_code, r.text[:200]) for _, r in answers if r.status_code not in (200, 202)})
        ids: dict[int, set[str]] = {}
        for i, r in answers:
            ids.setdefault(i, set()).add(r.json()["id"])
        assert all(len(v) == 1 for v in ids.values()), {i: v for i, v in ids.items() if len(v) > 1}
        assert len({next(iter(v)) for v in ids.values()}) == 40  # one job per distinct submission
        with s.client() as c:
            metrics = c.get("/metrics").text

        def counter(name: str) -> float:
            line = next(ln for ln in metrics.splitlines() if ln.startswith(name + " "))
            return float(line.split()[-1])

        # Every repeat was answered by the first job: joined while in flight, or its stored result.
        assert counter("quantcompare_submissions_joined_total") + counter("quantcompare_cache_hits_total") == 80
        assert counter("quantcompare_submissions_joined_total") > 0
        assert 'quantcompare_submissions_rejected_total{reason="queue_full"}' not in metrics
    finally:
        s.stop()
