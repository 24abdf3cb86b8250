"""``quantcompare-client check``: exit codes, report file, summary (against the fake API)."""

from __future__ import annotations

import functools
import json

import httpx
import pytest
from client_fakes import FakeServer, problem_response, report_json

import quantcompare_client as qc
from quantcompare_client import cli

pytestmark = pytest.mark.usefixtures("fast_polls")


@pytest.fixture
def use_fake(monkeypatch):
    def install(server: FakeServer):
        monkeypatch.setattr(cli, "Client", functools.partial(qc.Client, transport=httpx.MockTransport(server.handler)))
        return server
    return install


def _verdict(*results):
    return {"passed": all(r[1] for r in results),
            "gates": [{"gate": g, "passed": p, "actual": 1.0, "message": m} for g, p, m in results],
            "failures": [f"{g}: {m}" for g, p, m in results if not p]}


def test_check_passes_writes_the_report_and_sends_the_gates(use_fake, tmp_path, capsys):
    server = use_fake(FakeServer(report=report_json(verdict=_verdict(("ort_qdq.all.sqnr_db>=25", True, "31.5 >= 25")))))
    out = tmp_path / "out" / "report.json"
    rc = cli.main(["check", "conv_relu", "--server", "http://qc.test", "--gate", "ort_qdq.all.sqnr_db>=25",
                   "--options", '{"levels": ["all"]}', "--out", str(out), "--quiet"])
    assert rc == 0
    sent = json.loads(server.requests[0].content)
    assert sent["options"] == {"levels": ["all"], "depth": "standard", "gates": [
        {"artifact": "ort_qdq", "level": "all", "metric": "sqnr_db", "op": ">=", "value": 25.0}]}
    assert json.loads(out.read_text())["id"] == "c0ffee"
    stdout = capsys.readouterr().out
    assert "verdict: PASSED (1/1 gates)" in stdout and f"report: {out}" in stdout


def test_check_exits_1_when_a_gate_fails(use_fake, tmp_path, capsys):
    use_fake(FakeServer(report=report_json(verdict=_verdict(("ort_qdq.all.sqnr_db>=40", False, "ort_qdq=31.5 not >= 40")))))
    rc = cli.main(["check", "conv_relu", "--server", "http://qc.test", "--gate", "ort_qdq.all.sqnr_db>=40",
                   "--out", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 1
    assert "FAIL  ort_qdq.all.sqnr_db>=40  ort_qdq=31.5 not >= 40" in capsys.readouterr().out
    assert (tmp_path / "r.json").exists()


def test_check_exits_2_when_the_server_ignored_the_gates(use_fake, tmp_path, capsys):
    use_fake(FakeServer())  # verdict with no gates evaluated
    rc = cli.main(["check", "conv_relu", "--server", "http://qc.test", "--gate", "status_ok",
                   "--out", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 2 and "evaluated 0 of 1 gates" in capsys.readouterr().err


def test_check_merges_gates_from_an_options_file(use_fake, tmp_path):
    server = use_fake(FakeServer(report=report_json(verdict=_verdict(("status_ok", True, "ok"), ("x", True, "ok")))))
    opts = tmp_path / "opts.json"
    opts.write_text(json.dumps({"gates": [{"metric": "status_ok"}]}))
    rc = cli.main(["check", "conv_relu", "--server", "http://qc.test", "--options", f"@{opts}",
                   "--gate", "*.all.cosine>=0.99", "--out", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 0
    assert [g["metric"] for g in json.loads(server.requests[0].content)["options"]["gates"]] == ["status_ok", "cosine"]


@pytest.mark.parametrize(
    "gates, options, depth, latency_levels",
    [
        (["*.all.int8_coverage>=0.9", "status_ok"], {}, "structure", None),  # structural gates alone
        (["calibration_data_uploaded"], {}, "structure", None),
        (["status_ok", "ort_qdq.all.sqnr_db>=25"], {}, "standard", None),  # one accuracy gate needs the runs
        (["ort_qdq.basic.latency_ratio<=1.2"], {}, "standard", ["all", "basic"]),  # and its level timed
        (["ort_qdq.basic.latency_ratio<=1.2"], {"levels": ["basic", "extended"]}, "standard", ["extended", "basic"]),
        (["status_ok"], {"depth": "full"}, "full", None),  # the user's depth wins
        ([], {}, None, None),  # no gate: the server's default
    ],
    ids=["coverage+status", "data flag", "accuracy", "latency at basic", "latency, levels given", "explicit depth",
         "no gates"],
)
def test_check_asks_for_the_depth_its_gates_need(use_fake, tmp_path, gates, options, depth, latency_levels):
    """A structural gate alone runs a ``structure`` job (no evaluation sample), a figure the gates read is
    measured, and nothing more is asked for (issue 39)."""
    results = [(g, True, "ok") for g in gates]
    server = use_fake(FakeServer(report=report_json(verdict=_verdict(*results))))
    argv = ["check", "conv_relu", "--server", "http://qc.test", "--out", str(tmp_path / "r.json"), "--quiet",
            "--options", json.dumps(options)]
    for g in gates:
        argv += ["--gate", g]
    assert cli.main(argv) == 0
    sent = json.loads(server.requests[0].content)["options"]
    assert sent.get("depth") == depth
    assert sent.get("latency_levels") == latency_levels
    # what the server makes of them: the options are valid there, and the gates' figures are measured
    from service.schemas.options import ComparisonOptions, timed_levels
    resolved = ComparisonOptions.model_validate(sent)
    assert all(g.level in timed_levels(resolved) for g in resolved.gates if g.metric == "latency_ratio")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "conv_relu", "--server", "http://qc.test", "--gate", "ort_qdq.all.sqnr>=25"], "unknown metric"),
        (["check", "conv_relu", "--server", "http://qc.test", "--options", "{not json"], "not valid JSON"),
        (["check", "conv_relu", "--server", "http://qc.test", "--options", "@/nonexistent.json"], "--options"),
        (["check", "missing.onnx", "--server", "http://qc.test"], "model file not found"),
        (["check", "conv_relu"], "--server URL is required"),
        (["check", "conv_relu", "--server", "qc.test"], "http://"),
        (["check", "nosuch_example", "--server", "http://qc.test"], "not_found: unknown example"),
    ],
    ids=["bad gate", "bad options JSON", "missing options file", "missing model", "no server", "server not a URL",
         "unknown example"],
)
def test_check_exits_2_on_usage_and_input_errors(use_fake, monkeypatch, capsys, argv, message):
    monkeypatch.delenv(cli.ENV_SERVER, raising=False)
    use_fake(FakeServer())
    assert cli.main(argv + ["--quiet"]) == 2
    assert message in capsys.readouterr().err


def test_check_exits_2_when_the_job_fails(use_fake, capsys):
    server = FakeServer()
    server.fail_with = {"type": "urn:quantcompare:problem:invalid_model", "title": "Invalid", "status": 422,
                        "detail": "not an ONNX model", "code": "invalid_model"}
    use_fake(server)
    assert cli.main(["check", "conv_relu", "--server", "http://qc.test", "--quiet"]) == 2
    assert "invalid_model: not an ONNX model (job c0ffee)" in capsys.readouterr().err


def test_check_exits_2_when_the_server_refuses(monkeypatch, capsys):
    transport = httpx.MockTransport(lambda r: problem_response(422, "invalid_options", "levels: unknown level 'fast'",
                                                               hint="one of disable_all ... all"))
    monkeypatch.setattr(cli, "Client", functools.partial(qc.Client, transport=transport))
    assert cli.main(["check", "conv_relu", "--server", "http://qc.test", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "invalid_options: levels: unknown level 'fast' (HTTP 422" in err and "hint: one of" in err


def test_argparse_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["check"])
    assert e.value.code == 2


def test_examples_and_download_commands(use_fake, tmp_path, capsys):
    server = use_fake(FakeServer())
    assert cli.main(["examples", "--server", "http://qc.test"]) == 0
    assert "conv_relu  Conv + ReLU" in capsys.readouterr().out
    assert cli.main(["download", "c0ffee", "ort_qdq.all.onnx", str(tmp_path), "--server", "http://qc.test"]) == 0
    assert (tmp_path / "ort_qdq.all.onnx").read_bytes() == server.artifact_bytes


def test_the_client_knows_every_metric_the_server_measures_only_past_structure():
    """check asks for the depth its gates need: a metric the client took for structural would send
    depth "structure", and the server would then refuse that gate."""
    from service.schemas.options import ACCURACY_METRICS
    from quantcompare_client import _gates

    assert set(_gates._ACCURACY_METRICS) == set(ACCURACY_METRICS)
