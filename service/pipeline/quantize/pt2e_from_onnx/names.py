"""ONNX tensor names from the upload, carried onto the PT2E file's nodes.

Path of a name: each ONNX node's converter runs inside ``torch.fx.traceback.annotate`` (module.py),
and torch.export runs under ``preserve_node_meta`` (program.py), so every FX node made from it has
``meta["custom"] = {"onnx_node", "onnx_op", "onnx_outputs"}``. prepare_pt2e/convert_pt2e and the
re-export by ``torch.onnx.export`` keep that meta (checked by tests/pipeline/quantize/pt2e_from_onnx/test_names.py).
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

import onnx

from service.pipeline.vocabulary import CONVERTER_METADATA_PREFIX, all_nodes, all_tensor_names, rename_reads


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


def restore_io_names(model_proto, input_names: list[str], output_names: list[str] | None = None) -> int:
    """Give the PT2E file's graph inputs and outputs the upload's names, by position; returns how many
    names changed.

    torch.onnx names them after the module: inputs as Python identifiers ("input.1" -> "input_1"),
    outputs after FX nodes ("permute_3"). Where the upload passes an input straight through to an
    output, torch names the output after the input and the input "<name>_orig", so ORT refused the
    upload's own feed ("Required inputs (['src_mask_orig']) are missing"). An upload output that is
    one of its inputs (valid ONNX) lists that input again, not torch's Identity copy ("x__1"). Any
    other tensor of the file that already bears one of the upload's names is renamed out of the way first.
    """
    from onnx_torch.module import python_names  # the converter's names for the inputs (torch at its top)

    graph = model_proto.graph
    inputs = [vi.name for vi in graph.input]
    if len(inputs) == len(input_names):
        renames = {old: new for old, new in zip(inputs, input_names) if old != new}
    else:  # initializers listed as inputs, or an input dropped: only the identifier spelling is known
        renames = {py: orig for py, orig in zip(python_names(input_names), input_names)
                   if py != orig and py in inputs}
    copies: dict[int, str] = {}  # output index -> upload name, where the value needs a second name
    same_as: dict[int, int] = {}  # output index -> the earlier output index whose value it lists again
    inputs_out: dict[int, str] = {}  # output index -> the upload input it lists (valid ONNX: an input passed out)
    outputs = [vi.name for vi in graph.output]
    if output_names is not None and len(outputs) == len(output_names):
        for k, (old, new) in enumerate(zip(outputs, output_names)):
            if new in input_names:  # torch wrote it as Identity(input) under its own name: list the input
                inputs_out[k] = new
                continue
            if output_names.index(new) != k:
                # the upload lists one tensor twice (valid ONNX); torch wrote the second as an Identity
                # alias: both outputs name the first's value, or 'new' would be defined twice
                same_as[k] = output_names.index(new)
                continue
            if old == new:
                continue
            if old in inputs or outputs.index(old) != k:
                copies[k] = new  # a graph input, or one value that is two outputs: an Identity names it
            else:
                renames[old] = new
    if not renames and not copies and not same_as and not inputs_out:
        return 0
    taken = set(renames.values()) | set(copies.values())
    existing = all_tensor_names(graph)
    for name in sorted((existing & taken) - set(renames)):  # a file tensor bearing an upload name
        k = 1
        while f"{name}__{k}" in existing or f"{name}__{k}" in taken:
            k += 1
        renames[name] = f"{name}__{k}"
    for vi in (*graph.input, *graph.value_info):
        vi.name = renames.get(vi.name, vi.name)
    for init in graph.initializer:
        init.name = renames.get(init.name, init.name)
    rename_reads(graph, renames)
    for node in graph.node:
        for k, name in enumerate(node.output):
            if name in renames:
                node.output[k] = renames[name]
    for k, vi in enumerate(graph.output):
        value = renames.get(vi.name, vi.name)
        if k in copies:
            graph.node.append(onnx.helper.make_node("Identity", [value], [copies[k]], name=f"quantcompare_output_{k}"))
            vi.name = copies[k]
        else:
            vi.name = value
    for k, first in same_as.items():
        graph.output[k].name = graph.output[first].name
    producers = {out: node for node in graph.node for out in node.output}
    passed = {}  # output index -> the Identity output it named before
    for k, name in inputs_out.items():
        value = graph.output[k].name
        node = producers.get(value)
        # only where the file's value is the input itself; anything else keeps torch's name
        if value == name or (node is not None and node.op_type == "Identity" and node.input[0] == name):
            graph.output[k].name, passed[k] = name, value
    _drop_dead_aliases(graph, {renames.get(outputs[k], outputs[k]) for k in same_as} | set(passed.values()))
    return len(renames) + len(copies) + len(same_as) + sum(1 for k, v in passed.items() if v != outputs[k])


def _drop_dead_aliases(graph, names: set[str]) -> None:
    """Remove the Identity nodes that wrote ``names`` once no node reads them and no output lists them:
    left in place, the alias is one more reader of the output value, and on x86 the Conv before it
    stayed float at every level (``io_dtype_mismatch``: its output Q/DQ was not converted to uint8)."""
    read = {t for node in all_nodes(graph) for t in node.input} | {vi.name for vi in graph.output}
    dead = [n for n in graph.node if n.op_type == "Identity" and n.output[0] in names and n.output[0] not in read]
    for node in dead:
        graph.node.remove(node)


