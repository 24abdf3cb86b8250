"""Every model of the tiny-model registry (tests/models.py) at its defaults is one onnx's full check
accepts and ONNX Runtime runs, with the output shapes it declares."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests import models

KW = {"conv_chain": {"layers": 2}}


@pytest.mark.parametrize("name", sorted(models.BUILDERS))
def test_a_registry_model_is_valid_and_runs_with_its_declared_output_shape(name, tmp_path):
    path = models.save(name, tmp_path / f"{name}.onnx", **KW.get(name, {}))
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    feed = {i.name: np.ones([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32) for i in model.graph.input}
    outs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)
    assert [list(o.shape) for o in outs] == [[d.dim_value for d in o.type.tensor_type.shape.dim]
                                            for o in model.graph.output]
