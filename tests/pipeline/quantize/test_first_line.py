"""A toolchain message cut to one line of 300 characters: ORT names the node it refuses last
("... of operator (Sqrt) in node (<name>) is invalid"), and ALBERT's long tensor names pushed it past
the cut, so ort_file_rejected's hint pointed at a node its message no longer named."""

from __future__ import annotations

import onnxruntime as ort
import pytest
from onnx import TensorProto

from service.pipeline.isolation import first_line
from tests import models


def test_a_long_ort_refusal_keeps_the_node_it_names(tmp_path):
    long = "encoder.albert_layer_groups.0.albert_layers.0.attention.query.bias_quantized" * 3
    path = models.save("unary", tmp_path / "m.onnx", op="Sqrt", x=long, shape=[2], elem=TensorProto.INT8,
                       node="the_refused_sqrt")
    with pytest.raises(Exception) as caught:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    full = str(caught.value).splitlines()[0]
    assert len(full) > 300 and full.rstrip(". ").endswith("is invalid") and "the_refused_sqrt" in full[-120:]
    line = first_line(caught.value)
    assert len(line) <= 340 and "the_refused_sqrt" in line and line.startswith(type(caught.value).__name__)
    assert first_line(ValueError("short")) == "ValueError: short"
