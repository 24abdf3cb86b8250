"""``check`` as a CI job sees it, against a real server: baseline gates, JUnit XML, the step summary.

The regression is real: the same conv_relu calibrated on one sample instead of 16, which costs
ort_qdq several dB of SQNR (measured: 20.2 -> 15.5 dB here), checked against the plain run's report.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

import quantcompare_client as qc
from quantcompare_client import cli

FAST = {"artifacts": ["ort_qdq"], "levels": ["all"], "latency": {"enabled": False}}
REGRESSED = {**FAST, "calibration_samples": 1}
RELATIVE = "ort_qdq.all.sqnr_db>=baseline-0.5"


def check(live_server, tmp_path, name, gates, options=FAST, *extra):
    out = tmp_path / f"{name}.json"
    argv = ["check", "conv_relu", "--server", live_server.url, "--options", json.dumps(options), "--out", str(out),
            "--junit", str(tmp_path / f"{name}.xml"), "--summary-md", str(tmp_path / f"{name}.md"), "--quiet"]
    for g in gates:
        argv += ["--gate", g]
    rc = cli.main(argv + list(extra))
    return rc, out


@pytest.fixture(scope="module")
def baseline(live_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("baseline")
    rc, out = check(live_server, tmp, "baseline", ["ort_qdq.all.sqnr_db>=10", "status_ok"])
    assert rc == 0
    return out, qc.Report.load(out), tmp


def test_the_regression_is_real(live_server, baseline, tmp_path):
    """The oracle for the tests below: one calibration sample lowers ort_qdq's SQNR by more than 0.5 dB."""
    with qc.Client(live_server.url) as client:
        regressed = client.compare("conv_relu", options=REGRESSED, progress=False, max_wait=600)
    assert regressed.sqnr_db("ort_qdq") < baseline[1].sqnr_db("ort_qdq") - 0.5


def test_same_model_against_its_own_baseline_file_exits_0_with_zero_delta(live_server, baseline, tmp_path):
    path, base, _ = baseline
    rc, out = check(live_server, tmp_path, "same", [RELATIVE], FAST, "--baseline", str(path))
    assert rc == 0
    gate = qc.Report.load(out).verdict.gates[0]
    assert gate.passed and gate.baseline == base.sqnr_db("ort_qdq") and gate.delta == 0.0
    assert "delta +0" in gate.message


def test_a_regression_against_the_baseline_file_exits_1_and_every_output_says_why(live_server, baseline, tmp_path,
                                                                                   monkeypatch):
    path, base, _ = baseline
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    rc, out = check(live_server, tmp_path, "regressed", [RELATIVE, "status_ok"], REGRESSED, "--baseline", str(path))
    assert rc == 1
    report = qc.Report.load(out)
    new, old = report.sqnr_db("ort_qdq"), base.sqnr_db("ort_qdq")
    gate = report.verdict.gates[0]
    assert not gate.passed and gate.actual == new and gate.baseline == old
    assert gate.delta == pytest.approx(new - old)
    assert f"baseline {old:.6g}" in gate.message and f"delta {new - old:+.4g}" in gate.message

    # JUnit: a testcase per gate, the failure carries the verdict's message, figures as properties
    root = ET.parse(tmp_path / "regressed.xml").getroot()
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures")) == ("2", "1")
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [RELATIVE, "status_ok"]
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("message") == gate.message
    assert cases[1].find("failure") is None
    props = {p.get("name"): p.get("value") for p in cases[0].findall("./properties/property")}
    assert float(props["baseline"]) == old and float(props["ort_qdq.all.sqnr_db"]) == pytest.approx(new, rel=1e-5)
    suite_props = {p.get("name"): p.get("value") for p in root.findall("./testsuite/properties/property")}
    assert suite_props["report_id"] == report.id
    assert suite_props["report_url"] == f"{live_server.url}/v1/comparisons/{report.id}/report.html"

    # the summary: the figures with their deltas, the verdict, the page link; appended to the step summary
    md = (tmp_path / "regressed.md").read_text()
    assert "❌ FAILED (1/2 gates)" in md
    assert f"{new:.2f} (Δ {new - old:+.2f})" in md
    assert f"[report page]({live_server.url}/v1/comparisons/{report.id}/report.html)" in md
    assert step_summary.read_text() == "earlier step\n" + md


def test_options_baseline_is_resolved_by_the_server(live_server, baseline, tmp_path):
    _, base, _ = baseline
    same = {**FAST, "baseline": base.id}
    rc, out = check(live_server, tmp_path, "srv_same", [RELATIVE], same)
    assert rc == 0
    sent = qc.Report.load(out)
    assert sent.options["gates"][0]["baseline_values"] == {"ort_qdq": base.sqnr_db("ort_qdq")}
    rc, out = check(live_server, tmp_path, "srv_regressed", [RELATIVE], {**REGRESSED, "baseline": base.id})
    assert rc == 1
    assert "(Δ -" in (tmp_path / "srv_regressed.md").read_text()  # the client fetched the baseline for deltas


def test_a_baseline_without_the_figure_fails_the_gate(live_server, baseline, tmp_path):
    path, _, _ = baseline  # the baseline ran ort_qdq only
    rc, out = check(live_server, tmp_path, "nofig", ["pt2e_qdq.all.sqnr_db>=baseline-0.5"],
                    {**FAST, "artifacts": ["pt2e_qdq", "ort_qdq"]}, "--baseline", str(path))
    assert rc == 1
    gate = qc.Report.load(out).verdict.gates[0]
    assert "the baseline has no sqnr_db at level 'all'" in gate.message


@pytest.mark.parametrize("options, extra, message", [
    (FAST, [], "is relative to a baseline, but none was given"),
    ({**FAST, "baseline": "f" * 32}, [], "options.baseline: no comparison with id"),
], ids=["no baseline at all", "an unknown baseline id"])
def test_a_relative_gate_without_a_usable_baseline_exits_2(live_server, tmp_path, capsys, options, extra, message):
    rc, _ = check(live_server, tmp_path, "bad", [RELATIVE], options, *extra)
    assert rc == 2 and message in capsys.readouterr().err
    error = ET.parse(tmp_path / "bad.xml").getroot().find("./testsuite/testcase/error")
    assert error is not None and message in error.get("message") + error.text
