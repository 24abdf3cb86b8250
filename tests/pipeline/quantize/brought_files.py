"""Quantized files as another tool would write them, made here with onnx.helper: brought beside the fp32 model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def per_tensor_qdq_around(model: onnx.ModelProto, node_names: set[str], *, x_scale: float = 4.0 / 127,
                          producer: tuple[str, str] = ("othertool", "9.9")) -> onnx.ModelProto:
    """``model`` with each named Conv/Gemm's first input behind a per-tensor symmetric int8 Q/DQ pair and its
    weight stored int8 (per-tensor, symmetric) behind a DequantizeLinear; every other node stays float, and the
    bias stays fp32. ``producer``: the file's producer_name/producer_version."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    nodes = []
    for node in g.node:
        if node.name not in node_names:
            nodes.append(node)
            continue
        x, w = node.input[0], node.input[1]
        tag = node.name
        weight = numpy_helper.to_array(inits[w])
        w_scale = float(np.abs(weight).max()) / 127
        q = np.clip(np.round(weight / w_scale), -127, 127).astype(np.int8)
        g.initializer.remove(inits[w])
        g.initializer.extend([
            numpy_helper.from_array(q, f"{w}_q"), numpy_helper.from_array(np.array(w_scale, np.float32), f"{w}_scale"),
            numpy_helper.from_array(np.array(0, np.int8), f"{w}_zp"),
            numpy_helper.from_array(np.array(x_scale, np.float32), f"{tag}_x_scale"),
            numpy_helper.from_array(np.array(0, np.int8), f"{tag}_x_zp")])
        nodes += [helper.make_node("QuantizeLinear", [x, f"{tag}_x_scale", f"{tag}_x_zp"], [f"{tag}_xq"], name=f"{tag}_q"),
                  helper.make_node("DequantizeLinear", [f"{tag}_xq", f"{tag}_x_scale", f"{tag}_x_zp"], [f"{tag}_xdq"],
                                   name=f"{tag}_dq"),
                  helper.make_node("DequantizeLinear", [f"{w}_q", f"{w}_scale", f"{w}_zp"], [f"{w}_dq"],
                                   name=f"{tag}_w_dq")]
        rewired = helper.make_node(node.op_type, [f"{tag}_xdq", f"{w}_dq", *node.input[2:]], list(node.output),
                                   name=node.name)
        rewired.attribute.extend(node.attribute)
        nodes.append(rewired)
    del g.node[:]
    g.node.extend(nodes)
    out.producer_name, out.producer_version = producer
    onnx.checker.check_model(out)
    return out


def renamed_input(model: onnx.ModelProto, new_name: str, *, elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``model`` with its first graph input renamed (and retyped): another model as far as its interface says."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    old = out.graph.input[0].name
    out.graph.input[0].name = new_name
    out.graph.input[0].type.tensor_type.elem_type = elem
    for node in out.graph.node:
        node.input[:] = [new_name if i == old else i for i in node.input]
    return out
