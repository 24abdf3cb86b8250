"""report.html in headless Chromium: the page renders its key content; a screenshot is kept
under tests/_screenshots/ for a person to look at."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.missing_tools import skip_or_fail

SHOTS = Path(__file__).resolve().parents[1] / "_screenshots"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1400,2600"]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        skip_or_fail("chromium is not installed (make system-deps installs it)")
    return path


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, timeout=120, check=False)


@pytest.mark.browser
def test_the_report_page_renders_in_chromium(real_server, conv_relu_job, tmp_path):
    url = real_server.base_url + conv_relu_job["links"]["report_html"]
    assert "default-src 'none'" in httpx.get(url, timeout=60).headers["content-security-policy"]
    rendered = run_chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", url)
    dom = rendered.stdout.decode("utf-8", "replace")
    # the page's Content-Security-Policy blocks nothing it needs: Chromium logs every violation
    assert "Content Security Policy" not in rendered.stderr.decode("utf-8", "replace")
    for text in ("At a glance", "Decisions: where each artifact decides it", "Rewrites between levels",
                 "pt2e_qdq", "ort_qdq", "ort_qoperator", "QLinearConv", "SQNR vs fp32", "Downloads",
                 "ort_qdq.all.onnx"):
        assert text in dom, text
    assert dom.count('<svg class="chart"') == 3  # SQNR and latency per level, SQNR by depth (layers)
    assert "SQNR vs fp32 by depth" in dom
    assert dom.count('<svg class="rw"') >= 3  # rewrites drawn, not just listed
    assert "http://" not in dom.replace(real_server.base_url, "").replace("http://www.w3.org/2000/svg", "")

    SHOTS.mkdir(exist_ok=True)
    shot = SHOTS / "report_conv_relu.png"
    shot.unlink(missing_ok=True)
    run_chromium(tmp_path, f"--screenshot={shot}", url)
    assert shot.is_file() and shot.stat().st_size > 20_000
