"""Tiny models and archive surgery for the safety tests (built in code, no files checked in)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import onnx
import pytest
from onnx import helper

from tests import models


def tiny_onnx(nodes=None, inputs=None, outputs=None, initializers=(), opset=17, ir=10, **graph_kw) -> onnx.ModelProto:
    """x [1, 4] -> Relu -> y at IR 10 (tests/models.py's 'relu'), each part replaceable."""
    return models.from_nodes(nodes if nodes is not None else [helper.make_node("Relu", ["x"], ["y"])],
                             inputs if inputs is not None else [models.value("x", [1, 4])],
                             outputs if outputs is not None else [models.value("y", [1, 4])],
                             initializers, opset=opset, ir=ir, **graph_kw)


def conv_onnx() -> onnx.ModelProto:
    return models.build("conv_relu", y_shape=["n", "c", "h", "w"], ir=10)


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


