"""The converter as a package: its op sets agree with the service's vocabulary where both name one, and
importing the package (or its registry) imports no torch, so the service's glue may import them anywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from onnx_torch import op_sets
from service.pipeline import vocabulary

ROOT = Path(__file__).resolve().parents[2]


def test_the_op_sets_both_name_are_the_same_sets():
    assert op_sets.RANDOM_OPS == vocabulary.RANDOM_OPS
    assert op_sets.SHAPE_READING_OPS == vocabulary.SHAPE_READING_OPS


def test_importing_the_package_and_its_registry_imports_no_torch(tmp_path):
    code = "import sys, onnx_torch, onnx_torch.registry, onnx_torch.op_sets; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
