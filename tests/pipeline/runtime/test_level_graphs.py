"""ORT writes the same level graph for the same file, level and options: a download can be made again."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.runtime.level_graphs import (
    LevelGraphMismatch,
    regenerate_level_graph,
    self_contained_bytes,
    session_and_level_graph,
)
from service.pipeline.vocabulary import graph_from_path


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    """Conv + BatchNormalization + Relu: ``basic`` folds the BN into the Conv (new weights), ``layout``
    adds NCHWc nodes on x86: every level writes a different graph."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w")
    bn = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
          (("g", rng.random(16) + 0.5), ("b", rng.standard_normal(16)), ("m", rng.standard_normal(16)),
           ("v", rng.random(16) + 0.5))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], [w, *bn])
    path = tmp_path_factory.mktemp("lg") / "net.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("level", ["disable_all", "basic", "all"])
def test_the_same_file_and_level_give_byte_identical_graph_and_weights(conv_model, tmp_path, level):
    _, a = session_and_level_graph(conv_model, level, tmp_path / "a", intra_op_threads=1)
    _, b = session_and_level_graph(conv_model, level, tmp_path / "b", intra_op_threads=1)
    assert a.digest == b.digest and a.graph.read_bytes() == b.graph.read_bytes()
    # The weights are in model.data (the graph alone is small), and the BN fold changed them at basic.
    assert a.data is not None and a.data_bytes > a.graph_bytes


def test_levels_that_rewrite_differ_and_a_download_checks_the_digests(conv_model, tmp_path):
    _, basic = session_and_level_graph(conv_model, "basic", tmp_path / "basic", intra_op_threads=1)
    _, none = session_and_level_graph(conv_model, "disable_all", tmp_path / "none", intra_op_threads=1)
    assert basic.digest != none.digest  # the Conv+BN fold wrote new weights
    out = regenerate_level_graph(conv_model, "basic", intra_op_threads=1, graph_sha256=basic.graph_sha256,
                                 data_sha256=basic.data_sha256, work=tmp_path / "w1", out=tmp_path / "basic.onnx")
    model = onnx.load(str(out))
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in onnx.load(str(basic.graph)).graph.node]
    # The size announced before the download is the size of the file served.
    lazy = graph_from_path(basic.graph, lazy=True)
    assert self_contained_bytes(lazy.model, basic.folder) == out.stat().st_size
    with pytest.raises(LevelGraphMismatch):
        regenerate_level_graph(conv_model, "disable_all", intra_op_threads=1, graph_sha256=basic.graph_sha256,
                               data_sha256=basic.data_sha256, work=tmp_path / "w2", out=tmp_path / "x.onnx")


def test_a_lazy_graph_reads_one_external_tensor_on_demand(conv_model, tmp_path):
    _, lg = session_and_level_graph(conv_model, "disable_all", tmp_path / "d", intra_op_threads=1)
    lazy = graph_from_path(lg.graph, lazy=True)
    full = graph_from_path(lg.graph)
    assert lazy.initializers["w"].data_location == TensorProto.EXTERNAL
    np.testing.assert_array_equal(lazy.init_array("w"), full.init_array("w"))


def test_a_layout_graph_ort_writes_in_another_node_order_or_names_has_one_digest(compared, tmp_path):
    """x86's NchwcTransformer writes its ReorderOutput nodes in an order and under names that change
    from one session to the next (``ReorderOutput`` / ``ReorderOutput_token_11``: op_zoo_net's fp32 at
    layout, measured); the graph is the same, and so is its digest, or a download of it would be
    refused as another ORT's."""
    from service.pipeline.runtime.level_graphs import canonical_graph_sha256

    _, workdir = compared("op_zoo_net")
    path = workdir / "artifacts" / "fp32.onnx"
    digests, orders = set(), set()
    for i in range(8):
        _, files = session_and_level_graph(path, "layout", tmp_path / f"s{i}", intra_op_threads=1)
        digests.add(files.digest)
        written = onnx.load(str(files.graph), load_external_data=False)
        orders.add(tuple((n.op_type, n.name, tuple(n.output)) for n in written.graph.node))
        assert canonical_graph_sha256(files.graph) == files.graph_sha256
    assert len(digests) == 1, (len(orders), digests)
    # What the digest still tells apart: another level's graph.
    _, basic = session_and_level_graph(path, "basic", tmp_path / "basic", intra_op_threads=1)
    assert basic.digest not in digests
