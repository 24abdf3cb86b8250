"""Tiny models and archive surgery for the safety tests (built in code, no files checked in)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def tiny_onnx(nodes=None, inputs=None, outputs=None, initializers=(), opset=17, ir=10, **graph_kw) -> onnx.ModelProto:
    nodes = nodes if nodes is not None else [helper.make_node("Relu", ["x"], ["y"])]
    inputs = inputs if inputs is not None else [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    outputs = outputs if outputs is not None else [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])]
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers), **graph_kw)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def conv_onnx() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    return tiny_onnx(
        nodes=[helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
        initializers=[w],
    )


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def read_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def write_members(members: dict[str, bytes], path: Path, *, compress: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compress) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=compress)
    return path


