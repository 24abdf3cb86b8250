"""The PT2E path of a detector that ends in a selection (NonMaxSuppression, NonZero, ...): the graph
up to the selection goes through PT2E, the selection and everything after it stay as the upload
wrote them, in float.

torch.export cannot trace a value-dependent output shape through the converter, and nothing after a
selection is worth quantizing (box decoding, gathering the kept rows): an int8 deployment runs that
post-processing in float anyway. So the upload is cut at the selections: the *prefix* (every node
not downstream of one) is converted and quantized like any upload, with the tensors the tail reads
as extra outputs; the *tail* nodes are then appended to the PT2E file, reading those outputs by
name, and the file's outputs are the upload's again, in the upload's order.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.errors import TailConversionChanged
from service.pipeline.inputs.output_shapes import graph_only_copy, selection_origins
from service.pipeline.ort.sessions import session_for
from service.pipeline.vocabulary import (
    COMPUTE_OPS, FLOAT_TAIL_KEY, ai_onnx_opset, node_reads, onnx_domain_name, op_key, subgraphs,
)

# The tail is appended as written: an upload past this many tail nodes is not a post-processing step.
MAX_TAIL_NODES = 2000
_TAIL_SUFFIX = "__upload_tail"


@dataclass
class SelectionSplit:
    prefix: Any  # onnx.ModelProto: the nodes before any selection, the cut tensors as extra outputs
    tail_nodes: list = field(default_factory=list)  # NodeProtos, in the upload's order
    tail_initializers: list = field(default_factory=list)
    tail_inputs: list = field(default_factory=list)  # graph inputs only the tail reads (ValueInfoProtos)
    inputs: list[str] = field(default_factory=list)  # the upload's input names, in order
    outputs: list = field(default_factory=list)  # the upload's graph outputs (ValueInfoProtos), in order
    cut: list[str] = field(default_factory=list)  # prefix tensors the tail reads
    opsets: dict[str, int] = field(default_factory=dict)
    first: str = ""  # "NonMaxSuppression 'nms'"

    def note(self) -> str:
        return (f"the upload's post-processing from {self.first} on ({len(self.tail_nodes)} node(s)) is not converted: "
                "an output shape that depends on the values has no torch.export form, so PT2E quantizes the graph "
                f"before it and the PT2E file runs those nodes in float as the upload wrote them, reading "
                f"{', '.join(map(repr, self.cut[:6]))}{' ...' if len(self.cut) > 6 else ''} from PT2E's graph")


def selection_split(model, shapes: dict[str, tuple[int, ...]]) -> SelectionSplit | None:
    """The cut of ``model`` (parsed without external data) at its first selections, or None when no
    top-level node is or holds a selection, or the tail is not post-processing: longer than
    MAX_TAIL_NODES, or with as many compute ops (Conv, MatMul, Gemm, ...) as the graph before it."""
    import onnx
    from onnx import helper

    graph = model.graph
    origin, _ = selection_origins(graph)
    tail_idx = [i for i, n in enumerate(graph.node) if any(o in origin for o in n.output)]
    if not tail_idx or len(tail_idx) > MAX_TAIL_NODES:
        return None
    first = next(origin[o] for o in graph.node[tail_idx[0]].output if o in origin)
    in_tail = set(tail_idx)
    prefix_nodes = [n for i, n in enumerate(graph.node) if i not in in_tail]
    tail_nodes = [n for i, n in enumerate(graph.node) if i in in_tail]
    before = sum(op_key(n) in COMPUTE_OPS for n in prefix_nodes)
    if not before or sum(op_key(n) in COMPUTE_OPS for n in tail_nodes) >= before:
        # Nothing before the selection that PT2E would quantize, or as much compute after it (a NonZero
        # early in the network): no post-processing tail, so the converter's refusal stands.
        return None
    prefix_made = {o for n in prefix_nodes for o in n.output if o}
    tail_reads: set[str] = set()
    for n in tail_nodes:
        tail_reads |= node_reads(n)
    prefix_reads: set[str] = set()
    for n in prefix_nodes:
        prefix_reads |= node_reads(n)
    output_names = [o.name for o in graph.output]
    cut = sorted(tail_reads & prefix_made, key=_order(prefix_nodes))
    init_names = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in init_names]

    # Types of the cut tensors, from inference on the graph without its weights, at the job's shapes.
    try:
        inferred = onnx.shape_inference.infer_shapes(graph_only_copy(model, shapes), strict_mode=False,
                                                     data_prop=True)
    except Exception:  # noqa: BLE001 - no types for the cut: no file to declare it in, the refusal stands
        return None
    typed = {vi.name: vi for vi in (*inferred.graph.value_info, *inferred.graph.output, *graph.value_info)}
    prefix = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    prefix.opset_import.extend(model.opset_import)
    prefix.functions.extend(model.functions)
    g = prefix.graph
    g.name = graph.name
    g.node.extend(prefix_nodes)
    g.input.extend(vi for vi in inputs if vi.name in prefix_reads)
    g.initializer.extend(t for t in graph.initializer if t.name in prefix_reads)
    g.output.extend(o for o in graph.output if o.name in prefix_made)
    for t in cut:
        if t in output_names:
            continue
        vi = typed.get(t)
        if vi is None or not vi.type.tensor_type.elem_type:
            return None  # a cut tensor without a type: no file to declare it in
        g.output.append(helper.make_value_info(t, vi.type))
    by_domain = {onnx_domain_name(o.domain): o.version for o in model.opset_import}
    return SelectionSplit(
        prefix=prefix, tail_nodes=tail_nodes,
        tail_initializers=[t for t in graph.initializer if t.name in tail_reads],
        tail_inputs=[vi for vi in inputs if vi.name in tail_reads and vi.name not in prefix_reads],
        inputs=[vi.name for vi in inputs], outputs=list(graph.output), cut=cut, opsets=by_domain, first=first)


def _order(nodes):
    position = {o: i for i, n in enumerate(nodes) for o in n.output}
    return lambda t: position.get(t, -1)


@contextmanager
def prefix_file(split: SelectionSplit, upload: Path):
    """The prefix written to a file for the converter, removed after. Beside the upload when its
    weights are external data (their locations are relative to the file), else in a temporary
    folder (a CLI user's model folder is left alone)."""
    import onnx

    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in split.prefix.graph.initializer)
    folder = Path(upload).parent if external else Path(tempfile.mkdtemp(prefix="qc-prefix-"))
    path = folder / f".{Path(upload).stem}.pt2e_prefix.onnx"
    try:
        onnx.save(split.prefix, path)
        yield path
    finally:
        path.unlink(missing_ok=True)
        if not external:
            shutil.rmtree(folder, ignore_errors=True)


def splice_tail(path: Path, split: SelectionSplit, *, prefix_path: Path, feed: dict) -> None:
    """Append the tail to the PT2E file at ``path`` (its ai.onnx opset, tail converted when the
    upload's differs); the file's outputs become the upload's, in order. A converted tail is run
    beside the upload's on the fp32 prefix's tensors for ``feed`` (one calibration sample): a
    conversion that changes a value fails the path (TailConversionChanged), never a wrong file."""
    import onnx
    from onnx import helper, version_converter

    proto = onnx.load(str(path))
    target = ai_onnx_opset(proto)
    tail_nodes, tail_inits = list(split.tail_nodes), list(split.tail_initializers)
    if split.opsets.get("", target) != target:
        made = {o.name: o for o in proto.graph.output}
        tail_graph = helper.make_graph(
            tail_nodes, "tail", [made[t] for t in split.cut if t in made] + list(split.tail_inputs),
            [o for o in split.outputs if o.name not in {x.name for x in proto.graph.output}], tail_inits)
        tail_model = helper.make_model(tail_graph, opset_imports=[helper.make_opsetid(d, v) for d, v in split.opsets.items()])
        tail_model.ir_version = proto.ir_version
        try:
            converted = version_converter.convert_version(tail_model, target)
        except Exception as e:  # noqa: BLE001 - an op without an adapter: a refusal with the converter's words
            raise TailConversionChanged(
                f"onnx's version converter cannot rewrite the upload's post-processing from {split.first} on "
                f"for the PT2E file's opset {target}: {str(e).splitlines()[0][:300] if str(e) else type(e).__name__}",
                stage="quantize", hint=_TAIL_HINT) from e
        _same_results(tail_model, converted, split, prefix_path, feed)
        tail_nodes, tail_inits = list(converted.graph.node), list(converted.graph.initializer)
    taken = {t.name for t in proto.graph.initializer} | {o for n in proto.graph.node for o in n.output} \
        | {i.name for i in proto.graph.input}
    mine = {t.name for t in tail_inits} | {o for n in tail_nodes for o in n.output}
    final = {o.name for o in split.outputs}
    renames = {t: t + _TAIL_SUFFIX for t in mine & taken if t not in final}
    for i, node in enumerate(tail_nodes):
        _rename(node, renames)
        # ORT keeps node names (not metadata) in the graphs it saves: the blockers find the tail by name.
        node.name = node.name or f"{node.op_type}_after_selection_{i}"
        node.metadata_props.add(key=FLOAT_TAIL_KEY, value=split.first)
    for t in tail_inits:
        t.name = renames.get(t.name, t.name)
    proto.graph.node.extend(tail_nodes)
    proto.graph.initializer.extend(tail_inits)
    have = {i.name: i for i in proto.graph.input}
    for vi in split.tail_inputs:
        have.setdefault(vi.name, vi)
    ordered_inputs = [have[n] for n in split.inputs if n in have] + [v for k, v in have.items() if k not in split.inputs]
    del proto.graph.input[:]
    proto.graph.input.extend(ordered_inputs)
    written = {o.name: o for o in proto.graph.output}
    del proto.graph.output[:]
    proto.graph.output.extend(written.get(o.name, o) for o in split.outputs)
    known = {o.domain for o in proto.opset_import}
    for domain, version in split.opsets.items():
        if domain not in known and any(n.domain == domain for n in tail_nodes):
            proto.opset_import.append(helper.make_opsetid(domain, version))
    onnx.save(proto, str(path))


def _same_results(tail, converted, split: SelectionSplit, prefix_path: Path, feed: dict) -> None:
    import numpy as np

    prefix = session_for(prefix_path, "disable_all")
    wanted = [i.name for i in tail.graph.input]
    cut = [t for t in wanted if t in split.cut]
    values = dict(zip(cut, prefix.run(cut, {i.name: feed[i.name] for i in prefix.get_inputs()})))
    values.update({t: feed[t] for t in wanted if t not in values})
    before = session_for(tail.SerializeToString(), "disable_all").run(None, values)
    after = session_for(converted.SerializeToString(), "disable_all").run(None, values)
    for o, a, b in zip(tail.graph.output, before, after):
        if np.shape(a) != np.shape(b) or not np.allclose(a, b, rtol=1e-6, atol=0, equal_nan=True):
            raise TailConversionChanged(
                f"the upload's post-processing from {split.first} on changes output {o.name!r} once onnx's "
                f"version converter rewrites it for the PT2E file's opset {converted.opset_import[0].version}",
                stage="quantize", hint=_TAIL_HINT)


_TAIL_HINT = ("export the model at opset 18 or later (the opset torch.onnx writes), or without its "
              "post-processing; the ORT paths are unaffected")


def _rename(node, renames: dict[str, str]) -> None:
    if not renames:
        return
    for i, x in enumerate(node.input):
        node.input[i] = renames.get(x, x)
    for i, x in enumerate(node.output):
        node.output[i] = renames.get(x, x)
    for body in subgraphs(node):
        for inner in body.node:
            _rename(inner, renames)
