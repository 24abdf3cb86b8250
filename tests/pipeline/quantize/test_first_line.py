"""A toolchain message cut to one line of 300 characters: ORT names the node it refuses last
("... of operator (Sqrt) in node (<name>) is invalid"), and ALBERT's long tensor names pushed it past
the cut, so ort_file_rejected's hint pointed at a node its message no longer named."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from service.pipeline.isolation import first_line


def test_a_long_ort_refusal_keeps_the_node_it_names(tmp_path):
    long = "encoder.albert_layer_groups.0.albert_layers.0.attention.query.bias_quantized" * 3
    graph = helper.make_graph(
        [helper.make_node("Sqrt", [long], ["y"], name="the_refused_sqrt")], "g",
        [helper.make_tensor_value_info(long, TensorProto.INT8, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(Exception) as caught:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    full = str(caught.value).splitlines()[0]
    assert len(full) > 300 and full.rstrip(". ").endswith("is invalid") and "the_refused_sqrt" in full[-120:]
    line = first_line(caught.value)
    assert len(line) <= 340 and "the_refused_sqrt" in line and line.startswith(type(caught.value).__name__)
    assert first_line(ValueError("short")) == "ValueError: short"
