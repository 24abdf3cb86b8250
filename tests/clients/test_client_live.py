"""The client, the CI command and the curl recipes against a real ``quantcompare serve`` on loopback.

Every comparison here is ``conv_relu`` with one of two option sets, so the server's result cache
runs each set once per session however many tests read it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from client_fakes import REPO

import quantcompare_client as qc

from tests.cpu import sqnr_floor
from tests.missing_tools import skip_or_fail

CURL = REPO / "clients" / "curl"
# The SQNR gate reads level basic, where ORT still computes in float (no QDQ fusion yet): its figure
# is the same on every CPU. At level all an AVX2-only CPU's u8s8 QLinearConv saturates (tests/cpu.py).
PASSING = ["ort_qdq.basic.sqnr_db>=25", "status_ok", "*.all.int8_coverage>=0.5"]
FAILING = ["ort_qdq.all.sqnr_db>=200"]


def gates_options(texts: list[str]) -> dict:
    return {"gates": [qc.parse_gate(t) for t in texts]}


def upload_options(report: qc.Report) -> dict:
    """Options for re-uploading the example's fp32.onnx: small, and its dynamic batch pinned."""
    return {"artifacts": ["ort_qdq"], "levels": ["all"], "latency": {"enabled": False},
            "input_shapes": report.raw["model"]["resolved_input_shapes"]}


@pytest.fixture(scope="module")
def passing_report(live_server) -> qc.Report:
    with qc.Client(live_server.url) as client:
        return client.compare("conv_relu", options=gates_options(PASSING), progress=False, max_wait=600)


def test_compare_an_example_returns_a_report_with_every_path(passing_report):
    r = passing_report
    assert r.model.name == "conv_relu" and len(r.id) == 32
    assert {n: a.status for n, a in r.artifacts.items()} == {
        "fp32": "ok", "pt2e_qdq": "ok", "ort_qdq": "ok", "ort_qoperator": "ok"}
    assert r.levels == ["disable_all", "basic", "extended", "layout", "all"]
    qdq = r.artifacts["ort_qdq"]
    assert qdq.quantization.format == "qdq" and qdq.quantization.bias_summary == "int32"
    assert r.artifacts["pt2e_qdq"].quantization.bias_summary == "float32"
    assert r.sqnr_db("ort_qdq", "basic") > 25 and r.sqnr_db("ort_qdq") > sqnr_floor("all", clean=25)
    assert r.int8_coverage("ort_qdq") > 0
    assert r.level("ort_qdq", "all").op_histogram
    assert r.verdict.passed and [g.gate for g in r.verdict.gates] == ["ort_qdq.basic.sqnr_db>=25", "status_ok",
                                                                       "*.all.int8_coverage>=0.5"]
    assert "verdict: PASSED (3/3 gates)" in r.summary_text()
    assert "<table>" in r._repr_html_()


def test_get_download_examples_versions_and_page(live_server, passing_report, tmp_path):
    with qc.Client(live_server.url) as client:
        job = client.get(passing_report.id)
        assert job.status == "succeeded" and job.report.id == passing_report.id
        names = {a.name for a in client.artifacts(passing_report.id)}
        assert {"fp32.onnx", "ort_qdq.onnx", "ort_qdq.all.onnx"} <= names
        path = client.download(passing_report.id, "ort_qdq", tmp_path, level="all")
        assert path.name == "ort_qdq.all.onnx" and path.stat().st_size > 0
        assert "conv_relu" in [e.name for e in client.examples()]
        assert "onnxruntime" in client.versions()["versions"]
        assert passing_report.id in client.report_html(passing_report.id)


def test_upload_a_file_path(live_server, passing_report, tmp_path):
    with qc.Client(live_server.url) as client:
        fp32 = client.download(passing_report.id, "fp32.onnx", tmp_path)
        report = client.compare(fp32, options=upload_options(passing_report), progress=False, max_wait=600)
    assert report.model.format == "onnx" and report.artifacts["ort_qdq"].ok


def test_server_refusals_arrive_as_typed_errors(live_server):
    with qc.Client(live_server.url) as client:
        with pytest.raises(qc.NotFound) as e:
            client.get("0" * 32)
        assert e.value.code == "not_found" and e.value.url.endswith("/v1/comparisons/" + "0" * 32)
        with pytest.raises(qc.InvalidRequest) as e:
            client.compare("conv_relu", options={"bogus": 1})
        assert e.value.code == "invalid_options" and "bogus" in e.value.message and e.value.status == 422


# ---- quantcompare-client check (the real console script) --------------------------------------

def run_check(live_server, gates: list[str], out: Path) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("quantcompare-client")), "check", "conv_relu",
           "--server", live_server.url, "--out", str(out)]
    for g in gates:
        cmd += ["--gate", g]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_check_exits_0_when_every_gate_passes(live_server, passing_report, tmp_path):
    proc = run_check(live_server, PASSING, tmp_path / "report.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "report.json").read_text())["verdict"]["passed"] is True
    assert "verdict: PASSED (3/3 gates)" in proc.stdout


def test_check_exits_1_when_a_gate_fails(live_server, tmp_path):
    proc = run_check(live_server, FAILING, tmp_path / "report.json")
    assert proc.returncode == 1, proc.stderr
    assert "FAIL  ort_qdq.all.sqnr_db>=200" in proc.stdout


def test_check_exits_2_when_the_server_is_unreachable(tmp_path):
    proc = subprocess.run([str(Path(sys.executable).with_name("quantcompare-client")), "check", "conv_relu",
                           "--server", "http://127.0.0.1:9", "--out", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "cannot reach quantcompare at http://127.0.0.1:9" in proc.stderr


# ---- curl recipes -------------------------------------------------------------------------------

@pytest.fixture
def curl_and_jq() -> None:
    if not (shutil.which("curl") and shutil.which("jq")):
        skip_or_fail("curl and jq are needed (make system-deps installs them)")


needs_curl = pytest.mark.usefixtures("curl_and_jq")


def recipe(live_server, name: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CURL / name), *args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "BASE_URL": live_server.url, **env})


@needs_curl
def test_curl_compare_an_example_and_poll(live_server, passing_report, tmp_path):
    proc = recipe(live_server, "compare.sh", "conv_relu", json.dumps(gates_options(PASSING)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["status"] == "succeeded" and job["report"]["verdict"]["passed"] is True
    proc = recipe(live_server, "poll.sh", job["id"], cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["id"] == job["id"]


@needs_curl
def test_curl_upload_a_file_with_options(live_server, passing_report, tmp_path):
    with qc.Client(live_server.url) as client:
        model = client.download(passing_report.id, "fp32.onnx", tmp_path)
    proc = recipe(live_server, "compare.sh", str(model), json.dumps(upload_options(passing_report)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["report"]["model"]["format"] == "onnx" and job["report"]["artifacts"]["ort_qdq"]["status"] == "ok"


@needs_curl
def test_curl_page_and_download(live_server, passing_report, tmp_path):
    proc = recipe(live_server, "page.sh", passing_report.id, "page.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert passing_report.id in (tmp_path / "page.html").read_text()
    proc = recipe(live_server, "download.sh", passing_report.id, cwd=tmp_path)
    assert proc.returncode == 0 and "ort_qdq.all.onnx\t" in proc.stdout
    proc = recipe(live_server, "download.sh", passing_report.id, "ort_qdq.all.onnx", "models", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "models" / "ort_qdq.all.onnx").stat().st_size > 0


@needs_curl
@pytest.mark.parametrize("gates, code", [(PASSING, 0), (FAILING, 1)], ids=["passing gates exit 0", "a failing gate exits 1"])
def test_curl_gate_exits_on_the_verdict(live_server, passing_report, tmp_path, gates, code):
    args = [json.dumps(g) for g in gates_options(gates)["gates"]]
    proc = recipe(live_server, "gate.sh", "conv_relu", *args, cwd=tmp_path)
    assert proc.returncode == code, proc.stderr
    assert json.loads((tmp_path / "report.json").read_text())["report"]["verdict"]["passed"] is (code == 0)
    assert ("PASS" if code == 0 else "FAIL") in proc.stdout


@needs_curl
@pytest.mark.parametrize(
    "name, args",
    [("poll.sh", ["0" * 32]), ("compare.sh", ["no_such_example"]), ("compare.sh", ["conv_relu", '{"bogus": 1}']),
     ("gate.sh", ["conv_relu"])],
    ids=["poll an unknown id", "an unknown example", "unknown options", "gate without gates"],
)
def test_curl_errors_exit_2_and_show_the_problem(live_server, tmp_path, name, args):
    proc = recipe(live_server, name, *args, cwd=tmp_path)
    assert proc.returncode == 2
    if name != "gate.sh":
        assert '"code":' in proc.stderr


# ---- brought files (artifact.<name>) ----------------------------------------------------------

@pytest.fixture(scope="module")
def brought_files(tmp_path_factory) -> dict[str, Path]:
    """The quantizer trial's fp32 model, a file of it quantized as another tool would (``mine``), and one of
    another model (its input renamed and float16)."""
    import onnx

    from tests.models import build
    from tests.pipeline.quantize.brought_files import per_tensor_qdq_around, renamed_input

    folder = tmp_path_factory.mktemp("brought")
    fp32 = build("conv_gap_gemm")
    files = {"fp32": folder / "fp32.onnx", "mine": folder / "mine.onnx", "other": folder / "other.onnx"}
    onnx.save(fp32, files["fp32"])
    onnx.save(per_tensor_qdq_around(fp32, {"conv1", "fc"}), files["mine"])
    onnx.save(renamed_input(per_tensor_qdq_around(fp32, {"conv1"}), "images", elem=onnx.TensorProto.FLOAT16),
              files["other"])
    return files


BROUGHT_ONLY = {"artifacts": [], "latency": {"enabled": False}, "advice": {"enabled": False}}


def test_the_client_brings_a_file_and_another_model_is_refused(live_server, brought_files):
    with qc.Client(live_server.url) as client:
        report = client.compare(brought_files["fp32"], options=BROUGHT_ONLY, artifacts={"mine": brought_files["mine"]},
                                progress=False, max_wait=600)
        assert set(report.artifacts) == {"fp32", "mine"} and report.artifacts["mine"].ok
        assert report.raw["artifacts"]["mine"]["tool"]["producer"].startswith("othertool 9.9")
        assert report.sqnr_db("mine", "all") > 20
        with pytest.raises(qc.InvalidRequest) as e:
            client.compare(brought_files["fp32"], options=BROUGHT_ONLY, artifacts={"other": brought_files["other"]},
                           progress=False)
    assert e.value.status == 422 and e.value.code == "artifact_mismatch"
    assert "input 'x' of the fp32 model is missing" in e.value.problem["differences"]


@needs_curl
def test_curl_brings_a_file_as_the_readme_shows(live_server, brought_files, tmp_path):
    proc = subprocess.run(["curl", "-sS", "-F", f"model=@{brought_files['fp32']}",
                           "-F", f"artifact.mine=@{brought_files['mine']}", "-F", "options=" + json.dumps(BROUGHT_ONLY),
                           f"{live_server.url}/v1/comparisons?wait=300"], capture_output=True, text=True, timeout=600)
    job = json.loads(proc.stdout)
    assert job["report"]["artifacts"]["mine"]["status"] == "ok", job
    assert job["report"]["artifacts"]["mine"]["optimized"]["all"]["numerics"]["worst_sqnr_db"] > 20


def test_the_client_cli_brings_a_file(live_server, brought_files, tmp_path):
    cmd = [str(Path(sys.executable).with_name("quantcompare-client")), "check", str(brought_files["fp32"]),
           "--server", live_server.url, "--out", str(tmp_path / "r.json"), "--options", json.dumps(BROUGHT_ONLY),
           "--artifact", f"mine={brought_files['mine']}", "--gate", "mine.all.sqnr_db>=20"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["verdict"]["passed"]
