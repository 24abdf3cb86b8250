"""The lint `symbolic_dims_measured_at_one_size` said "the artifacts keep symbolic input dims" for
every file; the PT2E file of an ONNX upload is exported at the job's shapes and runs at no other
(PP-OCRv4's detector: pt2e_qdq takes [1, 3, 320, 320] only; silero's fails at [1, 256]). The lint
now names the files that fixed them, checked on the files themselves."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.schemas.options import ComparisonOptions
from tests import models


def test_the_lint_names_the_pt2e_file_as_fixed_at_the_job_shapes(tmp_path):
    models.save("conv_relu", tmp_path / "m.onnx", x_shape=["N", 3, "H", "W"], y_shape=["N", 4, "H", "W"], pads=1,
                scale=0.3, names=("conv", "relu"), ir=8)
    options = ComparisonOptions.model_validate({
        "artifacts": ["pt2e_qdq", "ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 1,
        "input_shapes": {"x": [1, 3, 16, 16]},
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "m.onnx", model_name="m.onnx", options=options),
                            tmp_path / "job")
    lint = next(x for x in report.lints if x.code == "symbolic_dims_measured_at_one_size")
    assert lint.message.startswith("the artifacts but pt2e_qdq keep symbolic input dims (pt2e_qdq fixes them")
    assert lint.severity == "warning"
    art = tmp_path / "job" / "artifacts"
    other = {"x": np.zeros((1, 3, 24, 24), np.float32)}
    ort.InferenceSession(str(art / "ort_qdq.onnx"), providers=["CPUExecutionProvider"]).run(None, other)
    with pytest.raises(Exception, match="Got invalid dimensions|Got: 24"):  # what the lint says of the PT2E file
        ort.InferenceSession(str(art / "pt2e_qdq.onnx"), providers=["CPUExecutionProvider"]).run(None, other)
