"""Which tensors a node reads other than as its bias (ort_fixups._other_reads) is asked of each node.
It was keyed by ``id()`` of the node wrappers: protobuf makes new ones per iteration of ``graph.node``
and recycles their ids, so on brainmaze's seizure model (every Conv reading its own bias) one run
told ORT's paths "2 biases read by several nodes ... given one copy per reader" and the next did not."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.quantize.ort_fixups import _other_reads, shared_biases_copied


def _convs(n: int):
    """``n`` Convs in a chain, each with its own weight and bias, a Relu between each two."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(n):
        inits += [numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        cur = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class _NewWrappersEachTime:
    """A graph whose ``node`` gives new objects on every access, as protobuf's wrappers may be; every
    list handed out is kept, so no id is recycled and an id-keyed count would miss every bias reader."""

    def __init__(self, graph):
        self._graph, self._handed_out = graph, []

    @property
    def node(self):
        fresh = []
        for n in self._graph.node:
            copy = type(n)()
            copy.CopyFrom(n)
            fresh.append(copy)
        self._handed_out.append(fresh)
        return fresh


def test_the_reads_do_not_depend_on_which_wrapper_a_node_comes_back_as():
    other = _other_reads(_NewWrappersEachTime(_convs(3).graph))
    assert [other[f"b{i}"] for i in range(3)] == [0, 0, 0]
    assert other["r0"] == 1 and other["w1"] == 1
    model = _convs(3)
    assert shared_biases_copied(model) == {}  # and nothing is copied for a bias each Conv reads alone
