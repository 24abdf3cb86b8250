"""Rules of the code tree that a reviewer would otherwise check by hand.

- The API process never imports torch: importing any module of ``service`` leaves torch,
  torchao, onnx2torch and onnxruntime out of ``sys.modules`` (heavy imports live inside the
  functions that need them), and a running app answers a real upload without importing them.
- In-house and standard-library imports are top-level, so a module's first lines say what it
  depends on; only third-party toolchains (and the optional Celery executor) are imported lazily.
- No folder of ``service/`` holds more than 12 modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "service"
HEAVY = ("torch", "torchao", "onnx2torch", "onnxruntime")
# The ONNX -> torch converters: torch code by nature, imported only by
# quantize/onnx_torch/registry.py when a conversion runs (in a worker, never in the API process).
TORCH_ONLY = "service.pipeline.quantize.onnx_torch.ops."


def _python(code: str, *, cwd: Path) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_importing_any_service_module_imports_no_toolchain(tmp_path):
    heavy = _python(f"""
import importlib, pkgutil, sys
import service
for m in pkgutil.walk_packages(service.__path__, "service."):
    if m.name.startswith({TORCH_ONLY!r}):
        continue
    importlib.import_module(m.name)
print(sorted(h for h in {HEAVY!r} if h in sys.modules))
""", cwd=tmp_path)
    assert heavy == "[]"


def test_the_api_process_answers_an_upload_without_importing_torch(tmp_path):
    # A real app (lifespan, executor, prevalidation of the upload in the API process); its one
    # worker runs a job function that does not need the toolchain, so only the API is measured.
    # Prevalidation normally runs only for the real job function: it is switched on here.
    jobs = ROOT / "tests" / "jobs"
    heavy = _python(f"""
import io, sys
sys.path.insert(0, {str(jobs)!r})
import onnx
from onnx import TensorProto, helper
from fastapi.testclient import TestClient
from service.api import prevalidate
from service.api.app import create_app
from service.config import Settings

prevalidate.applies = lambda settings: True

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
settings = Settings(data_dir={str(tmp_path / "var")!r}, workers=1, worker_preload="", job_function="fault_jobs:run")
with TestClient(create_app(settings)) as c:
    assert c.get("/v1/versions").status_code == 200
    r = c.post("/v1/comparisons", files={{"model": ("m.onnx", model.SerializeToString())}})
    assert r.status_code in (200, 202), r.text
    assert c.get(r.json()["links"]["self"]).status_code == 200
print(sorted(h for h in {HEAVY!r} if h in sys.modules))
""", cwd=tmp_path)
    assert heavy == "[]"


# Lazy imports that stay lazy, and why.
LAZY_ALLOWED = {
    ("service/jobs/factory.py", "service.jobs.celery.executor"),  # celery/redis only when configured
    ("service/jobs/cli_worker.py", "service.jobs.celery.worker"),  # the same, for `quantcompare worker`
}
_STDLIB = set(sys.stdlib_module_names)


def _lazy_in_house_or_stdlib_imports() -> list[tuple[str, str]]:
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("service/pipeline/quantize/onnx_to_torch"):
            continue  # being replaced by quantize/onnx_torch/ (issue 12)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.col_offset == 0:
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for name in names:
                top = name.split(".")[0]
                if (top == "service" or top in _STDLIB) and (rel, name) not in LAZY_ALLOWED:
                    found.append((rel, name))
    return found


def test_in_house_and_stdlib_imports_are_top_level():
    assert _lazy_in_house_or_stdlib_imports() == []


@pytest.mark.parametrize("folder", sorted(p for p in SERVICE.rglob("*") if p.is_dir() and p.name != "__pycache__"),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_folder_holds_more_than_twelve_modules(folder):
    assert len([p for p in folder.glob("*.py") if p.name != "__init__.py"]) <= 12
