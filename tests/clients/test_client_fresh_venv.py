"""The client installs and works in a venv that holds only it and httpx: no torch, no onnxruntime,
no numpy, no ``service``. This is the notebook user's setup, so it runs against the live server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from client_fakes import REPO

pytestmark = pytest.mark.heavy

HEAVY_PACKAGES = ("torch", "torchao", "onnx", "onnxruntime", "numpy", "pydantic", "fastapi", "service", "IPython")


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("client-venv")
    python = shutil.which("python3.11") or sys.executable
    _run([python, "-m", "venv", root / "venv"])
    # Build from a copy: an in-tree build would leave build/ and egg-info behind in the repo.
    src = root / "src"
    shutil.copytree(REPO / "clients" / "python", src,
                    ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    pip = [root / "venv" / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run(pip + ["--no-deps", src], env=env)
    _run(pip + ["httpx>=0.27,<1"], env=env)
    return root / "venv"


SCRIPT = textwrap.dedent("""
    import importlib.util, sys
    heavy = {heavy!r}
    present = [m for m in heavy if importlib.util.find_spec(m) is not None]
    assert not present, f"installed in the client venv: {{present}}"

    from quantcompare_client import Client, Report, parse_gate
    with Client({url!r}) as qc:
        report = qc.compare("conv_relu", options={{"gates": [parse_gate("status_ok")]}}, progress=True, max_wait=600)
        assert isinstance(report, Report) and report.verdict.passed, report
        assert report.artifacts["ort_qdq"].ok
        html = report._repr_html_()
        assert "<table>" in html
        report.summary()
        assert [e.name for e in qc.examples()][0]
    loaded = [m for m in heavy if m in sys.modules]
    assert not loaded, f"imported: {{loaded}}"
    print("CLIENT-OK", report.id)
""")


def test_the_client_alone_compares_an_example_and_renders(client_venv, live_server):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    proc = _run([client_venv / "bin" / "python", "-I", "-c", SCRIPT.format(heavy=HEAVY_PACKAGES, url=live_server.url)],
                env=env, cwd=client_venv)
    assert "CLIENT-OK" in proc.stdout and "verdict: PASSED (1/1 gates)" in proc.stdout


def test_the_check_command_is_installed_with_the_client(client_venv, live_server, tmp_path):
    proc = subprocess.run([client_venv / "bin" / "quantcompare-client", "check", "conv_relu", "--server",
                           live_server.url, "--gate", "status_ok", "--out", tmp_path / "report.json", "--quiet"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.json").exists()
