"""ORT writes the same level graph for the same file, level and options: a download can be made again."""

from __future__ import annotations

import platform

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
from tests import models

X86 = platform.machine() in ("x86_64", "AMD64")


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    """Conv + BatchNormalization + Relu: ``basic`` folds the BN into the Conv (new weights), ``layout``
    adds NCHWc nodes on x86: every level writes a different graph."""
    return models.save("conv_bn_relu", tmp_path_factory.mktemp("lg") / "net.onnx", x_shape=[1, 3, 16, 16], cout=16,
                       pads=1)


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


def _nested_ifs(path, n: int = 2048):
    """If(sr == 16000) over two bodies that each hold a Constant and an If of their own, whose bodies
    hold a Constant too (silero VAD's shape, 117 such Constants): the constants are past the size ORT
    writes to the external initializers file."""
    def leaf(name, k):
        return helper.make_graph(
            [helper.make_node("Constant", [], [f"{name}_c"], value=numpy_helper.from_array(np.full(n, k, np.float32))),
             helper.make_node("Add", ["x", f"{name}_c"], [f"{name}_y"])],
            name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, n])])

    def middle(name):
        return helper.make_graph(
            [helper.make_node("Constant", [], [f"{name}_k"], value=numpy_helper.from_array(np.full(n, 0.5, np.float32))),
             helper.make_node("Mul", ["x", f"{name}_k"], [f"{name}_m"]),
             helper.make_node("ReduceSum", [f"{name}_m"], [f"{name}_s"], keepdims=0),
             helper.make_node("Greater", [f"{name}_s", "zero"], [f"{name}_p"]),
             helper.make_node("If", [f"{name}_p"], [f"{name}_y"], then_branch=leaf(name + "t", 2.0),
                              else_branch=leaf(name + "e", 3.0))],
            name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, n])])

    nodes = [helper.make_node("Constant", [], ["k16"], value=numpy_helper.from_array(np.array(16000, np.int64))),
             helper.make_node("Equal", ["sr", "k16"], ["is16"]),
             helper.make_node("If", ["is16"], ["y"], then_branch=middle("A"), else_branch=middle("B"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n]),
                                           helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_a_level_graph_with_constants_in_nested_bodies_downloads_as_a_file_ort_loads(tmp_path):
    """ORT 1.32 writes such a graph at disable_all with each body Constant both as the node and as an
    initializer, and refuses its own file (not in SSA form): silero's fp32.disable_all.onnx was shipped
    so. The download drops the initializers those Constants shadow, and its size is known beforehand,
    the bodies' weights included (the report said 161 KB for a 2.3 MB file)."""
    import onnxruntime as ort

    from service.pipeline.runtime.level_graphs import self_contained_from_level_graph

    model = _nested_ifs(tmp_path / "ifs.onnx")
    _, files = session_and_level_graph(model, "disable_all", tmp_path / "lg", intra_op_threads=1)
    with pytest.raises(Exception, match="single static assignment|SSA"):  # the condition, in the installed ORT
        ort.InferenceSession(str(files.graph), providers=["CPUExecutionProvider"])
    out = self_contained_from_level_graph(files, tmp_path / "download.onnx")
    predicted = self_contained_bytes(onnx.load(str(files.graph), load_external_data=False), files.folder)
    assert predicted == out.stat().st_size > 4 * 2048 * 4
    feed = {"x": np.random.default_rng(0).standard_normal((1, 2048)).astype(np.float32), "sr": np.array(16000, np.int64)}
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not X86, reason="on ARM QDQIsInt8Allowed() is true: the entry changes nothing")
def test_a_download_makes_the_graph_again_with_the_jobs_ort_session(tmp_path, capsys):
    """A job with options.ort_session wrote its level graphs with the entry; the download's subprocess
    (``main``, argv as level_downloads.py passes it) sets it again, and gets another graph without it."""
    import json

    from service.pipeline.runtime.level_graphs import main
    from tests.pipeline.inspect.test_blockers import conv_model as qdq_conv

    path = qdq_conv(tmp_path, in_dtype="int8", out_dtype="int8", in_readers=2, out_readers=2)
    config = {"session.qdqisint8allowed": "1"}
    _, made = session_and_level_graph(path, "extended", tmp_path / "job", intra_op_threads=1, session_config=config)
    argv = [str(path), "extended", "1", made.graph_sha256, made.data_sha256 or "-"]
    assert main([*argv, str(tmp_path / "with.onnx"), json.dumps(config)]) == 0
    assert "QLinearConv" in {n.op_type for n in onnx.load(str(tmp_path / "with.onnx")).graph.node}
    assert main([*argv, str(tmp_path / "without.onnx")]) == 2
    assert '"level_graph_mismatch"' in capsys.readouterr().out
    # level_downloads.py reads the entries from the job's report.json, as the job ran them
    from types import SimpleNamespace

    from service.jobs.storage.level_downloads import level_graph_entries

    report = {"options": {"ort_session": config}, "artifacts": {"mine": {"optimized": {"extended": {
        "file": "mine.extended.onnx", "file_stored": False, "graph_sha256": made.graph_sha256}}}}}
    files = SimpleNamespace(report_bytes=lambda job_id: json.dumps(report).encode())
    assert level_graph_entries(files, "a" * 32)["mine.extended.onnx"].session_config == config
