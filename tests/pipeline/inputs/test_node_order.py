"""Nodes listed before the nodes they read: ORT sorts a graph when it loads it and runs the file,
onnx's checker refuses it. Such a file was refused at submit ("Nodes in a graph must be
topologically sorted"); now it is taken, and every path reads the sorted fp32 reference."""
from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from service.errors import InvalidModel
from service.pipeline.inputs.node_order import sort_nodes
from service.pipeline.inputs.safety import onnx_model_from_path
from tests import models

F = TensorProto.FLOAT


def _chain(order: list[int]) -> onnx.ModelProto:
    """x -> Relu a -> Neg b -> Abs y, plus an independent Sigmoid s, listed in ``order``."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Neg", ["a"], ["b"], name="neg"),
             helper.make_node("Abs", ["b"], ["y"], name="abs"), helper.make_node("Sigmoid", ["x"], ["s"], name="sig")]
    g = helper.make_graph([nodes[k] for k in order], "g", [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4]), helper.make_tensor_value_info("s", F, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_an_out_of_order_upload_is_taken_and_sorted_as_ort_sorts_it(tmp_path):
    model = _chain([2, 3, 0, 1])
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(model)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    onnx_model_from_path(path)  # taken at submit

    assert sort_nodes(model.graph) == 4
    assert [n.name for n in model.graph.node] == ["sig", "relu", "neg", "abs"]  # free nodes keep their place
    onnx.checker.check_model(model)


def test_a_sorted_graph_is_left_as_it_is_and_a_cycle_is_still_refused(tmp_path):
    model = _chain([3, 0, 1, 2])
    assert sort_nodes(model.graph) == 0
    assert [n.name for n in model.graph.node] == ["sig", "relu", "neg", "abs"]

    cyclic = _chain([0, 1, 2, 3])
    cyclic.graph.node[0].input[0] = "b"  # relu reads neg's output
    assert sort_nodes(cyclic.graph) == 0
    onnx.save(cyclic, tmp_path / "c.onnx")
    with pytest.raises(InvalidModel, match="cycle"):
        onnx_model_from_path(tmp_path / "c.onnx")


def test_a_body_is_sorted_with_the_outer_names_it_reads():
    body = helper.make_graph([helper.make_node("Neg", ["t"], ["o"], name="neg"),
                              helper.make_node("Relu", ["x"], ["t"], name="relu")], "then", [],
                             [helper.make_tensor_value_info("o", F, [1, 4])])
    other = models.branch("Identity", ["x"], "o2", [1, 4])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=other)], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    assert sort_nodes(g) == 2
    then = next(a.g for a in g.node[0].attribute if a.name == "then_branch")  # make_node copied the body
    assert [n.name for n in then.node] == ["relu", "neg"]
