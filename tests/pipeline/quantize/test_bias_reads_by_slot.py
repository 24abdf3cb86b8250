"""Which tensors a node reads other than as its bias (ort_fixups._other_reads) is asked of each node.
It was keyed by ``id()`` of the node wrappers: protobuf makes new ones per iteration of ``graph.node``
and recycles their ids, so on brainmaze's seizure model (every Conv reading its own bias) one run
told ORT's paths "2 biases read by several nodes ... given one copy per reader" and the next did not."""
from __future__ import annotations

from service.pipeline.quantize.ort_fixups import _other_reads, shared_biases_copied
from tests import models


def _convs(n: int):
    """``n`` Convs in a chain, each with its own weight and bias, a Relu between each two."""
    return models.build("conv_chain", layers=n)


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
