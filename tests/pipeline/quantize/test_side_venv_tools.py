"""ModelOpt and Quark, each in its side venv (`make tools`), on the quantizer trial's model beside ORT's QDQ path.

`make tools` is not part of `make test` (1.4 GB + 1.7 GB): without it these tests skip and say so. What they pin
(shared/notes/quantizers.md): Quark's matched file is ORT's (the same SQNR), its XINT8 preset is not; ModelOpt's
activations are symmetric whatever matched asks, and its file is raised to opset 19.
"""

from __future__ import annotations

import onnx
import pytest

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.quantize.tools.tool_paths import TOOL_PATHS, tool_python
from service.schemas.options import ComparisonOptions
from tests.models import build

QUIET = {"latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}}


def _needs(*artifacts: str) -> None:
    missing = [a for a in artifacts if tool_python(TOOL_PATHS[a]) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)}: tool not installed (run `make tools`: "
                    f"{'; '.join(TOOL_PATHS[a].install for a in missing)})")


@pytest.fixture(scope="module")
def fp32_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("side_venv") / "fp32.onnx"
    onnx.save(build("conv_gap_gemm"), path)
    return path


def _compare(fp32_file, workdir, **options):
    return run_comparison(ComparisonRequest(model_path=fp32_file, options=ComparisonOptions.model_validate(
        {**QUIET, **options})), workdir)


@pytest.fixture(scope="module")
def matched(fp32_file, tmp_path_factory):
    _needs("modelopt_qdq", "quark_qdq")
    return _compare(fp32_file, tmp_path_factory.mktemp("matched"),
                    artifacts=["ort_qdq", "modelopt_qdq", "quark_qdq"])


def _sqnr(report, name: str) -> float:
    art = report.artifacts[name]
    assert art.status == "ok", art.error
    return art.optimized["all"].numerics.worst_sqnr_db


def test_quark_matched_is_ort_quantize_static_and_says_who_made_it(matched):
    assert _sqnr(matched, "quark_qdq") == pytest.approx(_sqnr(matched, "ort_qdq"), abs=0.01)
    art = matched.artifacts["quark_qdq"]
    assert art.file.producer_name == "quark.onnx"  # Quark names itself; the stamp adds the preset
    assert art.file.metadata_props["quantcompare.tool_version"] == art.tool.version == "0.13"
    assert art.tool.settings["not_matched"] == []


def test_quark_xint8_is_its_own_preset(fp32_file, tmp_path, matched):
    report = _compare(fp32_file, tmp_path, artifacts=["quark_qdq"], tool_presets={"quark_qdq": "xint8"})
    art = report.artifacts["quark_qdq"]
    assert art.file.metadata_props["quantcompare.preset"] == "xint8"
    assert _sqnr(report, "quark_qdq") < _sqnr(matched, "quark_qdq") - 3  # power-of-two scales cost accuracy


def test_modelopt_matched_keeps_activations_symmetric_and_raises_the_opset(matched):
    art = matched.artifacts["modelopt_qdq"]
    assert art.status == "ok", art.error
    activations = [t for t in art.quantization.tensors if t.role == "activation"]
    assert activations and all(t.zero_point == [0] for t in activations)  # ORT's matched: asymmetric
    assert any(t.zero_point != [0] for t in matched.artifacts["ort_qdq"].quantization.tensors if t.role == "activation")
    assert art.file.opset_imports["ai.onnx"] == 19
    assert art.file.producer_name == "onnx.quantize"  # ORT's name: only the stamp says ModelOpt made it
    assert art.file.metadata_props["quantcompare.tool"].startswith("NVIDIA ModelOpt")
    assert any("symmetric" in s for s in art.tool.settings["not_matched"])


def test_modelopt_patches_ort_quantization_so_it_runs_only_in_a_subprocess():
    """Why the path is a subprocess: ModelOpt's quantize() patches ORT's calibrator factory (patch_ort_modules),
    process-wide, for every later quantize_static in that process."""
    import subprocess

    _needs("modelopt_qdq")
    code = ("import onnxruntime.quantization.calibrate as c; before = c.create_calibrator; "
            "import modelopt.onnx.quantization.ort_patching as p; p.patch_ort_modules(); "
            "print(c.create_calibrator is before)")
    out = subprocess.run([str(tool_python(TOOL_PATHS["modelopt_qdq"])), "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-2000:]
