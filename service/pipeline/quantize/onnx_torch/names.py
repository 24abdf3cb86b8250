"""ONNX tensor names from the upload, carried onto the PT2E file's nodes.

Path of a name: each ONNX node's converter runs inside ``torch.fx.traceback.annotate`` (module.py),
and torch.export runs under ``preserve_node_meta`` (program.py), so every FX node made from it has
``meta["custom"] = {"onnx_node", "onnx_op", "onnx_outputs"}``. prepare_pt2e/convert_pt2e and the
re-export by ``torch.onnx.export`` keep that meta (checked by tests/pipeline/onnx_torch/test_names.py).
torch.onnx writes each ONNX node's FX node into ``metadata_props["pkg.torch.onnx.fx_node"]``
("%conv2d : ..."); ``annotate_onnx`` looks that FX node up and adds to the ONNX node:

    quantcompare.onnx_node      the upload's node name ("conv")
    quantcompare.onnx_op        its op type ("Conv")
    quantcompare.onnx_outputs   the upload's tensors it computes, comma-separated ("c")

To align the PT2E file with the upload tensor by tensor: for an upload tensor T, the PT2E node
that computes it is the *last* node (graph order) whose ``quantcompare.onnx_outputs`` lists T;
its first output is T's value (before the Q/DQ PT2E puts after it). Q/DQ nodes carry no source.
"""
from __future__ import annotations

import re

from service.pipeline.vocabulary import CONVERTER_METADATA_PREFIX

from .module import python_names

KEYS = ("onnx_node", "onnx_op", "onnx_outputs")
PREFIX = CONVERTER_METADATA_PREFIX
_FX_NAME = re.compile(r"^%([\w.]+)\s*:")


def fx_sources(graph_module) -> dict[str, dict[str, str]]:
    """FX node name -> {"onnx_node", "onnx_op", "onnx_outputs"} for nodes made from an ONNX node."""
    out = {}
    for n in graph_module.graph.nodes:
        custom = n.meta.get("custom") or {}
        if "onnx_node" in custom:
            out[n.name] = {k: str(custom[k]) for k in KEYS if k in custom}
    return out


def annotate_onnx(model_proto, graph_module) -> int:
    """Add the quantcompare.onnx_* metadata to ``model_proto``'s nodes; returns how many got it."""
    sources = fx_sources(graph_module)
    done = 0
    for node in model_proto.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        m = _FX_NAME.match(props.get("pkg.torch.onnx.fx_node", ""))
        src = sources.get(m.group(1)) if m else None
        if not src or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for k, v in src.items():
            entry = node.metadata_props.add()
            entry.key, entry.value = PREFIX + k, v
        done += 1
    return done


def upload_tensor_map(model_proto) -> dict[str, str]:
    """Upload tensor name -> the PT2E file's tensor holding its value (last annotated producer)."""
    out: dict[str, str] = {}
    for node in model_proto.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        names = props.get(PREFIX + "onnx_outputs")
        if not names or not node.output:
            continue
        for name in filter(None, names.split(",")):
            out[name] = node.output[0]
    return out


def restore_input_names(model_proto, input_names: list[str]) -> int:
    """Rename the PT2E file's graph inputs back to the upload's input names ("input.1"), which the
    torch module had to spell as Python identifiers ("input_1"); returns how many were renamed."""
    renames = {py: orig for py, orig in zip(python_names(input_names), input_names) if py != orig}
    graph = model_proto.graph
    present = {i.name for i in graph.input}
    renames = {a: b for a, b in renames.items() if a in present}
    if not renames:
        return 0
    for vi in graph.input:
        if vi.name in renames:
            vi.name = renames[vi.name]
    _rename_uses(graph, renames)
    for vi in graph.output:
        if vi.name in renames:  # an input passed straight through
            vi.name = renames[vi.name]
    return len(renames)


def _rename_uses(graph, renames: dict[str, str]) -> None:
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renames:
                node.input[k] = renames[name]
        for attr in node.attribute:
            if attr.HasField("g"):
                _rename_uses(attr.g, renames)
            for g in attr.graphs:
                _rename_uses(g, renames)
