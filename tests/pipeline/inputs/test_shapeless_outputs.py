"""A graph output declared without a shape (onnx-graphsurgeon writes one when a new output tensor has
no shape set): ORT runs the file, onnx's checker refuses it. Before, the upload was refused
("give every graph input and output a shape"); now the fp32 reference gets the shapes inference
gives, says so, and every path runs. An input without a shape is still refused: samples need one."""
from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from service.errors import InvalidModel
from tests import models


def _matmul_relu(path, *, output_type: bool = True, input_shape=True):
    y = onnx.ValueInfoProto()
    y.name = "y"
    if output_type:
        y.type.tensor_type.elem_type = TensorProto.FLOAT  # a type, no shape
    return models.save("matmul_relu", path, x_shape=[1, 8] if input_shape else None, w=(8, 4), y=y,
                       names=("mm", "relu"), ir=8)


@pytest.mark.parametrize("output_type", [True, False], ids=["type without shape", "no type at all"])
def test_an_output_without_a_shape_is_given_the_inferred_one_and_every_path_runs(tmp_path, output_type):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    path = _matmul_relu(tmp_path / "m.onnx", output_type=output_type)
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # ORT runs the upload as it is
    with pytest.raises(onnx.checker.ValidationError, match="is required but missing"):
        onnx.checker.check_model(onnx.load(str(path)))
    options = ComparisonOptions.model_validate({"levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
                                                "latency": {"enabled": False}, "advice": {"enabled": False},
                                                "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=path, model_name="m.onnx", options=options), tmp_path / "job")
    assert all(a.status == "ok" for a in report.artifacts.values()), {n: a.error for n, a in report.artifacts.items()}
    assert [(o.dtype, o.shape) for o in report.model.outputs] == [("float32", [1, 4])]
    assert any("declared no shape" in n for n in report.model.notes)
    written = onnx.load(str(tmp_path / "job" / "artifacts" / "fp32.onnx"))
    onnx.checker.check_model(written)  # the reference is a valid file now


def test_an_input_without_a_shape_is_still_refused(tmp_path):
    from service.pipeline.inputs.safety import onnx_model_from_path

    with pytest.raises(InvalidModel, match="give every graph input and output a shape"):
        onnx_model_from_path(_matmul_relu(tmp_path / "m.onnx", input_shape=False))
