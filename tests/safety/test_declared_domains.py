"""A domain only imported is no reason to refuse a file; a domain a node uses still is."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from service.errors import UnsupportedModel
from service.pipeline.inspect.domains import domains_used_by_nodes, unused_opset_imports
from service.pipeline.inputs.safety import onnx_model_from_path
from tests import models

UNUSED = ["ai.onnx.training", "ai.onnx.preview.training", "com.microsoft.experimental",
          "com.microsoft.mlfeaturizers", "pkg.paddle2onnx"]


def _model(extra_nodes=(), *, then_domain=None, imports=UNUSED):
    then_g = (models.branch("Relu", ["x"], "t", [1, 4]) if then_domain is None else
              models.branch("Custom", ["x"], "t", [1, 4], domain=then_domain))
    else_g = models.branch("Neg", ["x"], "e", [1, 4])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             h.make_node("Greater", ["s", "zero"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g), *extra_nodes]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
                     [onnx.numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)] + [h.make_opsetid(d, 1) for d in imports])


def test_unused_imports_are_accepted_and_listed_and_ort_runs_the_file(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    model = onnx_model_from_path(path)  # refused as unsupported_model before
    assert unused_opset_imports(model) == sorted(UNUSED)
    # The oracle for "harmless": ORT itself loads and runs the file as declared.
    out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((1, 4), np.float32)})
    assert out[0].shape == (1, 4)


@pytest.mark.parametrize("where", ["main_graph", "if_branch"])
def test_a_node_in_an_unsupported_domain_is_still_refused_naming_node_and_domain(tmp_path, where):
    if where == "main_graph":
        m = _model([h.make_node("Custom", ["y"], ["z"], name="custom0", domain="com.microsoft.experimental")])
    else:
        m = _model(then_domain="com.microsoft.experimental")
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(UnsupportedModel, match="uses operator domain 'com.microsoft.experimental'") as info:
        onnx_model_from_path(tmp_path / "m.onnx", structural_check=False)
    assert info.value.details["domain"] == "com.microsoft.experimental"


def test_domains_used_include_subgraphs_and_function_bodies():
    m = _model(then_domain="com.microsoft")
    fn = h.make_function("local.fns", "F", ["a"], ["b"], [h.make_node("Gelu", ["a"], ["b"], domain="com.microsoft")],
                         [h.make_opsetid("com.microsoft", 1)])
    m.functions.append(fn)
    assert domains_used_by_nodes(m) == {"", "com.microsoft"}
