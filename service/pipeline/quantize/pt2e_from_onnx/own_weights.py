"""Each Conv gets its own weight and bias initializer, so torchao's XNNPACK quantizer can quantize it.

torchao annotates a conv together with its weight and bias nodes, and skips a conv when any node of
that group is already annotated (``_xnnpack_quantizer_utils._annotate_conv`` and its relu/bn/transpose
variants: ``partition = [conv_node, conv_node.args[1], bias]``, ``if _is_annotated(partition): continue``).
The converter registers one parameter per initializer, so an initializer read by several Convs becomes
one ``get_attr`` node that every conv shares, and only the first conv would be quantized: a siamese
network's second branch (CapSpot's ``sim_model.onnx``: 13 of 26 Convs) or the Convs whose identical
weights or biases an exporter merged into one initializer (basic-pitch's ``nmp.onnx``: one weight read by
9 Convs, one bias by 18). The ONNX file cannot say whether the model shared the tensor or the exporter
merged equal ones, and ORT's quantizer quantizes every reader, so the PT2E path does too: every Conv
after the first reads a copy. Linear layers need no copy: the converters' ``Gemm``/``MatMul`` weights
reach ``aten.linear`` through their own transpose or constant (measured: both of two Gemms sharing a
weight are quantized).

The copies are the converter's, not the upload's: once torch.onnx.export has written the PT2E file,
``shared_again`` points every reader of equal int8 copies back at one initializer (equal bytes, so
equal outputs), and the file stores a shared weight once, as the upload and ORT's quantizer do.
"""
from __future__ import annotations

from collections import defaultdict

import onnx

from service.pipeline.files import repeated_initializers
from service.pipeline.vocabulary import all_nodes, all_tensor_names, is_onnx_domain

__all__ = ["OWN_WEIGHT_OPS", "COPY_LIMIT_BYTES", "own_weight_copies", "shared_again"]

OWN_WEIGHT_OPS = {"Conv", "ConvTranspose"}
_SLOTS = (1, 2)  # weight, bias
# past this many bytes of copies the readers keep sharing (an ALBERT-like model that reuses its
# layers would copy every layer's weights once per use), and the note says which convs stay float
COPY_LIMIT_BYTES = 256 << 20


def _shared_conv_inputs(graph) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """Initializer -> the (Conv, slot) pairs that read it as weight or bias, for those read by several."""
    inits = {t.name for t in graph.initializer}
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        if node.op_type in OWN_WEIGHT_OPS and is_onnx_domain(node.domain):
            for slot in _SLOTS:
                if slot < len(node.input) and node.input[slot] in inits:
                    readers[node.input[slot]].append((node, slot))
    return {name: r for name, r in readers.items() if len(r) > 1}


def _constant_shared_conv_inputs(graph) -> int:
    """A weight or bias several Convs read that a Constant, or a ConstantOfShape of an initializer,
    computes becomes an initializer, in place, so it gets copies like one; the number made. The
    constant folding before this merges equal such nodes into one (its common-subexpression pass),
    and the converter folds them only later (onnx's light_inception_v1, a caffe2 export that writes
    each weight as a ConstantOfShape of 0.02: 24 of 55 Convs shared one)."""
    import numpy as np
    from onnx import numpy_helper

    inits = {t.name: t for t in graph.initializer}
    readers: dict[str, int] = defaultdict(int)
    for node in graph.node:
        if node.op_type in OWN_WEIGHT_OPS and is_onnx_domain(node.domain):
            for slot in _SLOTS:
                if slot < len(node.input) and node.input[slot] and node.input[slot] not in inits:
                    readers[node.input[slot]] += 1
    made = 0
    for node in list(graph.node):
        if len(node.output) != 1 or readers.get(node.output[0], 0) < 2 or not is_onnx_domain(node.domain):
            continue
        value_attr = next((a for a in node.attribute if a.name == "value" and a.HasField("t")), None)
        try:
            if node.op_type == "Constant" and value_attr is not None:
                value = numpy_helper.to_array(value_attr.t)
            elif node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
                dims = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]).reshape(-1))
                fill = numpy_helper.to_array(value_attr.t).reshape(-1) if value_attr is not None \
                    else np.zeros(1, np.float32)
                value = np.full(dims, fill[0], dtype=fill.dtype)
            else:
                continue
        except Exception:  # noqa: BLE001 - an unreadable constant stays a node (the converter folds it)
            continue
        graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        graph.node.remove(node)
        made += 1
    return made


def own_weight_copies(model, notes: list[str], *, limit_bytes: int = COPY_LIMIT_BYTES) -> int:
    """Give every Conv after the first reader of a shared weight/bias initializer its own copy, in
    place; returns the number of copies and says what it did in ``notes``."""
    graph = model.graph
    _constant_shared_conv_inputs(graph)
    shared = _shared_conv_inputs(graph)
    if not shared:
        return 0
    tensors = {t.name: t for t in graph.initializer}
    names = all_tensor_names(graph)
    copies = copied_bytes = 0
    copied: set[str] = set()
    left: dict[str, int] = {}  # initializer -> Convs past the limit that still share it
    for name, readers in shared.items():
        size = tensors[name].ByteSize()  # the serialized size, without serializing a copy
        for node, slot in readers[1:]:
            if copied_bytes + size > limit_bytes:
                left[name] = left.get(name, 0) + 1
                continue
            k = 1
            while f"{name}__{node.op_type.lower()}{k}" in names:
                k += 1
            new = f"{name}__{node.op_type.lower()}{k}"
            names.add(new)
            copy = graph.initializer.add()
            copy.CopyFrom(tensors[name])
            copy.name = new
            node.input[slot] = new
            copies += 1
            copied_bytes += size
            copied.add(name)
    if copies:
        notes.append(f"{len(copied)} initializers are read by several "
                     f"Convs as weight or bias; each Conv after the first reads its own copy ({copies} copies, "
                     f"{copied_bytes / 2**20:.1f} MiB), because torchao's XNNPACK quantizer skips a conv whose "
                     "weight or bias another conv already annotated")
    if left:
        notes.append(f"{sum(left.values())} Convs share a weight or bias with another Conv and were not given a "
                     f"copy (more than {limit_bytes >> 20} MiB of copies): torchao's XNNPACK quantizer leaves them "
                     f"in float ({', '.join(sorted(left)[:3])}{', ...' if len(left) > 3 else ''})")
    return copies


def shared_again(model, base_dir) -> tuple[int, int]:
    """Point every reader of an initializer that repeats another's bytes (dtype, shape and content,
    1 KiB or more) at the first of them and drop the rest, in place; (copies dropped, bytes saved).
    A copy that is also a graph output keeps its name."""
    outputs = {o.name for o in model.graph.output}
    first_of: dict[str, str] = {}
    saved = 0
    for group in repeated_initializers(model, base_dir):
        for name in group.names[1:]:
            if name not in outputs:
                first_of[name] = group.names[0]
                saved += group.nbytes
    if not first_of:
        return 0, 0
    for node in all_nodes(model.graph):
        node.input[:] = [first_of.get(i, i) for i in node.input]
    kept = [t for t in model.graph.initializer if t.name not in first_of]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    return len(first_of), saved
