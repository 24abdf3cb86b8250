"""A model whose weights live in external data arrives as a .zip of model + data files.

The archive is extracted into the job's own folder and the model is loaded *by path* from
there, so every path (PT2E via onnx2torch, ORT QDQ / QOperator) sees the real weights.
"""

from __future__ import annotations

import zipfile

import numpy as np
import onnx
import pytest

from service.errors import InvalidModel, QuantCompareError
from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions
from tests.cpu import sqnr_floor


@pytest.fixture(scope="module")
def zipped_external_data_model(tmp_path_factory, tiny_onnx_models):
    src = tmp_path_factory.mktemp("ext")
    model = onnx.load(str(tiny_onnx_models["tiny_conv_net"]))
    onnx.save_model(model, str(src / "net.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="net.weights", size_threshold=1024)  # exporters keep small constants inline
    assert (src / "net.weights").stat().st_size > 10_000
    archive = src / "net.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(src / "net.onnx", "net.onnx")
        zf.write(src / "net.weights", "net.weights")
    return archive


def test_zip_with_external_data_runs_every_path(zipped_external_data_model, tmp_path):
    request = ComparisonRequest(model_path=zipped_external_data_model, model_name="net.zip",
                                options=ComparisonOptions(latency={"enabled": False}, calibration_samples=4,
                                                          eval_samples=2))
    report = run_comparison(request, tmp_path)
    assert report.model.format == "onnx"
    assert {a: art.status for a, art in report.artifacts.items()} == {
        "fp32": "ok", "pt2e_qdq": "ok", "ort_qdq": "ok", "ort_qoperator": "ok"}
    # Real weights reached the quantizers: int8 weights with non-trivial scales, good SQNR.
    weights = [t for t in report.artifacts["ort_qdq"].quantization.tensors if t.role == "weight"]
    assert weights and all(max(t.scale) > 0 for t in weights)
    assert report.artifacts["ort_qdq"].optimized["all"].numerics.worst_sqnr_db > sqnr_floor("all", clean=20)
    # The fp32 artifact keeps its external data beside it, inside the job folder.
    assert (tmp_path / "artifacts" / "fp32.onnx").is_file() and (tmp_path / "artifacts" / "net.weights").is_file()
    # and its size is the model's, weights included (it read 1-2 KiB, below every int8 file's)
    fp32 = report.artifacts["fp32"].file
    data = (tmp_path / "artifacts" / "net.weights").stat().st_size
    assert fp32.external_data_bytes == data and fp32.size == (tmp_path / "artifacts" / "fp32.onnx").stat().st_size + data
    assert fp32.size > report.artifacts["ort_qdq"].file.size


def test_zip_without_the_data_file_is_refused_by_name(zipped_external_data_model, tmp_path):
    partial = tmp_path / "partial.zip"
    with zipfile.ZipFile(zipped_external_data_model) as src, zipfile.ZipFile(partial, "w") as dst:
        dst.writestr("net.onnx", src.read("net.onnx"))
    with pytest.raises(QuantCompareError) as e:
        run_comparison(ComparisonRequest(model_path=partial), tmp_path / "job")
    assert "net.weights" in e.value.message or "external" in e.value.message.lower()
    assert "/tmp" not in e.value.message


def test_a_model_named_in_capitals_is_taken_like_any_other(zipped_external_data_model, tmp_path):
    """Extraction finds the model by its suffix in any case (NET.ONNX), but the archive check read
    '.onnx' only: such an upload was refused as 'a zip archive holding an ONNX model', with a hint
    to upload archives where the API documents them (it does)."""
    upper = tmp_path / "upper.zip"
    with zipfile.ZipFile(zipped_external_data_model) as src, zipfile.ZipFile(upper, "w") as dst:
        dst.writestr("NET.ONNX", src.read("net.onnx"))
        dst.writestr("net.weights", src.read("net.weights"))
    options = ComparisonOptions(artifacts=["ort_qdq"], levels=["disable_all"], latency={"enabled": False},
                                advice={"enabled": False}, layers={"enabled": False}, calibration_samples=2,
                                eval_samples=1)
    report = run_comparison(ComparisonRequest(model_path=upper, model_name="upper.zip", options=options), tmp_path / "job")
    assert report.model.format == "onnx" and report.artifacts["ort_qdq"].status == "ok"
