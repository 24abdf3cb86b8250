"""clients/ci: the GitHub and GitLab files validate against their published schemas, and their
check scripts, run as CI would run them, drive a real server to exit 0/1 with the files kept.

The schemas are the ones check-jsonschema vendors (``vendor.github-workflows``,
``vendor.github-actions``, ``vendor.gitlab-ci``): no network at test time.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.missing_tools import require_module
from client_fakes import REPO

ruamel_yaml = require_module("ruamel.yaml")

CI = REPO / "clients" / "ci"
WORKFLOW = CI / "github" / "quantcompare.yml"
ACTION = CI / "github" / "quantcompare-check" / "action.yml"
GITLAB = CI / "gitlab" / ".gitlab-ci.yml"
FAST = '{"artifacts": ["ort_qdq"], "levels": ["all"], "latency": {"enabled": false}}'


def _validate(schema: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120)


def _yaml(path: Path):
    return ruamel_yaml.YAML(typ="safe").load(path.read_text())


def _dump(data) -> str:
    buf = io.StringIO()
    ruamel_yaml.YAML(typ="safe").dump(data, buf)
    return buf.getvalue()


@pytest.mark.parametrize("schema, path", [
    ("vendor.github-workflows", WORKFLOW), ("vendor.github-actions", ACTION), ("vendor.gitlab-ci", GITLAB),
], ids=["the workflow", "the composite action", "the gitlab template"])
def test_ci_file_is_valid_under_its_published_schema(schema, path, tmp_path):
    proc = _validate(schema, path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the same validator refuses the file once a required part is broken (the check is not vacuous)
    data = _yaml(path)
    if "jobs" in data:
        del data["jobs"]["quantcompare"]["runs-on"]
    elif "runs" in data:
        data["runs"]["using"] = "bash"
    else:
        data["quantcompare"]["artifacts"]["reports"]["junit"] = {"path": "junit.xml"}
    broken = tmp_path / path.name
    broken.write_text(_dump(data))
    assert _validate(schema, broken).returncode != 0


def test_the_workflow_keeps_report_and_junit_and_reads_the_junit(tmp_path):
    steps = _yaml(WORKFLOW)["jobs"]["quantcompare"]["steps"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["path"] == "quantcompare/" and upload["if"] == "always()"
    report = next(s for s in steps if s.get("uses", "").startswith("mikepenz/action-junit-report"))
    assert report["with"]["report_paths"] == "quantcompare/junit.xml"
    env = _yaml(WORKFLOW)["jobs"]["quantcompare"]["env"]
    assert env["QUANTCOMPARE_URL"] == "${{ secrets.QUANTCOMPARE_URL }}"
    assert env["QUANTCOMPARE_API_TOKEN"] == "${{ secrets.QUANTCOMPARE_API_TOKEN }}"
    gitlab = _yaml(GITLAB)["quantcompare"]
    assert gitlab["artifacts"]["reports"]["junit"] == "quantcompare/junit.xml" and gitlab["artifacts"]["when"] == "always"


# ---- the scripts, run as the CI runner runs them -------------------------------------------------

@pytest.fixture
def ci_env(live_server, tmp_path):
    """A job's workspace: the client on PATH (via this venv's python), secrets as env vars."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "quantcompare-client"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m quantcompare_client "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUANTCOMPARE_", "GITHUB_", "CI_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", QUANTCOMPARE_URL=live_server.url, MODEL="conv_relu",
               OPTIONS=FAST, GATES="status_ok\nort_qdq.all.sqnr_db>=10\n",
               BASELINE_GATES="ort_qdq.all.sqnr_db>=baseline-0.5\n")
    return work, env


def _run(script: str, work: Path, env: dict, shell: str = "bash") -> subprocess.CompletedProcess:
    return subprocess.run([shell, "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)


def _github_check_script() -> str:
    steps = _yaml(WORKFLOW)["jobs"]["quantcompare"]["steps"]
    return next(s["run"] for s in steps if s.get("name") == "quantcompare-client check")


def _gitlab_script() -> str:
    return "\n".join(_yaml(GITLAB)["quantcompare"]["script"])


def test_github_check_step_passes_then_gates_against_the_baseline(ci_env):
    work, env = ci_env
    summary = work / "step_summary.md"
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    first = _run(_github_check_script(), work, env)
    assert first.returncode == 0, first.stdout + first.stderr
    root = ET.parse(work / "quantcompare" / "junit.xml").getroot()
    assert [c.get("name") for c in root.iter("testcase")] == ["status_ok", "ort_qdq.all.sqnr_db>=10"]
    assert "✅ PASSED (2/2 gates)" in summary.read_text()

    # the next run finds the kept report as its baseline and adds the relative gate
    (work / "quantcompare-baseline").mkdir()
    shutil.copy(work / "quantcompare" / "report.json", work / "quantcompare-baseline" / "report.json")
    second = _run(_github_check_script(), work, {**env, "OPTIONS": FAST.replace("}}", '}, "calibration_samples": 1}')})
    assert second.returncode == 1, second.stdout + second.stderr  # one calibration sample: SQNR fell
    gates = json.loads((work / "quantcompare" / "report.json").read_text())["verdict"]["gates"]
    assert [g["gate"] for g in gates][-1] == "ort_qdq.all.sqnr_db>=baseline-0.5" and gates[-1]["delta"] < -0.5
    assert summary.read_text().count("### quantcompare") == 2


def test_gitlab_script_runs_under_sh_and_exits_with_the_verdict(ci_env):
    work, env = ci_env
    env.update(CI_PIPELINE_SOURCE="push")
    proc = _run(_gitlab_script(), work, env, shell="sh")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "✅ PASSED (2/2 gates)" in proc.stdout  # the summary is printed in the job log
    assert (work / "quantcompare" / "junit.xml").is_file() and (work / "quantcompare" / "report.json").is_file()
    failing = _run(_gitlab_script(), work, {**env, "GATES": "ort_qdq.all.sqnr_db>=200"}, shell="sh")
    assert failing.returncode == 1, failing.stdout + failing.stderr


def test_a_missing_server_url_exits_2_with_a_message(ci_env):
    work, env = ci_env
    env["QUANTCOMPARE_URL"] = ""
    proc = _run(_github_check_script(), work, env)
    assert proc.returncode == 2 and "QUANTCOMPARE_URL" in proc.stderr


def test_gitlab_merge_request_job_fetches_its_baseline_from_the_default_branch_artifacts(ci_env):
    """GitLab's 'download a single artifact file by ref name' endpoint, played by a loopback server."""
    import http.server
    import threading

    work, env = ci_env
    first = _run(_gitlab_script(), work, {**env, "CI_PIPELINE_SOURCE": "push"}, shell="sh")
    assert first.returncode == 0, first.stdout + first.stderr
    baseline = (work / "quantcompare" / "report.json").read_bytes()
    seen = []

    class GitLab(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            seen.append((self.path, self.headers.get("JOB-TOKEN")))
            ok = (self.path == "/api/v4/projects/7/jobs/artifacts/main/raw/quantcompare/report.json?job=quantcompare"
                  and self.headers.get("JOB-TOKEN") == "job-token")
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(baseline if ok else b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), GitLab)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        mr = {**env, "CI_PIPELINE_SOURCE": "merge_request_event", "CI_API_V4_URL": f"http://127.0.0.1:{server.server_port}/api/v4",
              "CI_PROJECT_ID": "7", "CI_DEFAULT_BRANCH": "main", "CI_JOB_NAME": "quantcompare", "CI_JOB_TOKEN": "job-token"}
        proc = _run(_gitlab_script(), work, mr, shell="sh")
    finally:
        server.shutdown()
    assert seen and proc.returncode == 0, proc.stdout + proc.stderr
    gates = json.loads((work / "quantcompare" / "report.json").read_text())["verdict"]["gates"]
    assert gates[-1]["gate"] == "ort_qdq.all.sqnr_db>=baseline-0.5" and gates[-1]["delta"] == 0.0
