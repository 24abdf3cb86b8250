"""The torch module that runs a specialized ONNX graph: one converter call per ONNX node.

How it is built (``build_module``): the graph is executed once, eagerly, on real example inputs
of the resolved (static) shapes. During that run every value whose inputs are all constants
(initializers, folded values, ``Shape``/``Size`` of a tensor whose static shape is now known) is
*folded*: computed once and kept as a numpy constant, never emitted into ``forward``. This is what
removes the ``Shape -> Gather -> Concat -> Reshape`` arithmetic, ``Range``, ``Expand`` shapes,
``If`` conditions and ``Loop`` trip counts: converters read them with ``ctx.const(...)`` as numpy.
Every other node is kept in the plan; ``forward`` walks the plan and calls its converter.

Tensor names: each kept node's converter runs inside ``torch.fx.traceback.annotate`` with
``{"onnx_node": name, "onnx_op": op_type, "onnx_outputs": "a,b"}``, so every FX node torch.export
makes from it carries ``node.meta["custom"]`` naming the ONNX node and the tensors it produced
(see names.py, which carries them onto the PT2E ONNX file). Initializers are registered under their (sanitized) ONNX names.

Subgraphs (If/Loop bodies) run through ``ctx.run_subgraph``; values folded inside them are cached
per invocation, in call order, which is the same at build time and at every forward.
"""

from __future__ import annotations

import keyword
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch.fx.traceback import annotate
import torch


from .op_sets import RANDOM_OPS, SHAPE_READING_OPS, ai_onnx_opset, is_onnx_domain
from .data_sizes import DATA_SIZED_OPS, SIZE_OPS, as_dim, shape_value, size_tensor, size_values
from .registry import (
    FUSED_DOMAIN, ConvertContext, OnnxNode, UnsupportedNode, _norm_domain, find_converter,
)

# ops whose output only depends on the (static) shape of their input
_SHAPE_OPS = SHAPE_READING_OPS
# ops never folded: their output is random or they hold state
_NEVER_FOLD = RANDOM_OPS
# above this many elements a folded value stays an op instead of a stored constant... except
# initializer-only expressions (weights), which are folded whatever their size.
_FOLD_LIMIT = 1 << 26


class ConversionError(Exception):
    """A node failed to convert; ``node`` names it."""

    def __init__(self, message: str, node: OnnxNode | None = None):
        super().__init__(message)
        self.node = node


class _StopBuild(Exception):
    """The build run cannot go past ``node`` (no converter, and the reference cannot run it)."""

    def __init__(self, node: OnnxNode):
        super().__init__(node.name)
        self.node = node


class MissingConverters(Exception):
    """Nodes with no converter (and not constant-foldable); ``missing`` counts (domain, op, opset)."""

    def __init__(self, missing: Counter):
        super().__init__(", ".join(f"{k} x{n}" for k, n in missing.items()))
        self.missing = missing


def decode_attrs(node) -> dict[str, Any]:
    from onnx import AttributeProto, helper, numpy_helper

    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
        elif a.type == AttributeProto.TENSORS:
            out[a.name] = [numpy_helper.to_array(t) for t in a.tensors]
        elif a.type == AttributeProto.STRING:
            out[a.name] = a.s.decode("utf-8", "replace")
        elif a.type == AttributeProto.STRINGS:
            out[a.name] = [s.decode("utf-8", "replace") for s in a.strings]
        elif a.type == AttributeProto.GRAPH:
            out[a.name] = a.g
        else:
            out[a.name] = helper.get_attribute_value(a)
    return out


def onnx_node(node) -> OnnxNode:
    return OnnxNode(op_type=node.op_type, domain=_norm_domain(node.domain),
                    name=node.name, inputs=tuple(node.input), outputs=tuple(node.output), attrs=decode_attrs(node))


def contiguous(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous, writable copy where needed; unlike np.ascontiguousarray, keeps 0-d arrays 0-d."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous and arr.flags.writeable else np.array(arr, order="C", copy=True)


def torch_to_numpy_dtype(dtype) -> np.dtype:

    return np.dtype(str(torch.empty((), dtype=dtype).numpy().dtype)) if dtype != torch.bfloat16 else np.dtype("float32")


def _as_numpy(t) -> np.ndarray:

    if isinstance(t, np.ndarray):
        return t
    if t.dtype == torch.bfloat16:
        return t.detach().float().numpy()
    return t.detach().cpu().numpy().copy()


def to_torch(value: np.ndarray):

    arr = np.asarray(value)
    if arr.dtype == np.uint16 or arr.dtype.kind in "OSU":
        raise UnsupportedNode(f"a constant of numpy dtype {arr.dtype}")
    if arr.dtype == np.uint32 or arr.dtype == np.uint64:
        arr = arr.astype(np.int64)
    return torch.from_numpy(contiguous(arr))


@dataclass
class _Scope:
    """Values visible while running one graph: this graph's, then the enclosing graphs'."""

    values: dict[str, Any] = field(default_factory=dict)  # name -> torch.Tensor
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    parent: "_Scope | None" = None

    def get(self, name: str):
        s = self
        while s is not None:
            if name in s.values:
                return s.values[name]
            s = s.parent
        raise KeyError(name)

    def const(self, name: str) -> np.ndarray | None:
        s = self
        while s is not None:
            if name in s.consts:
                return s.consts[name]
            if name in s.values:
                return None
            s = s.parent
        return None


class _Context(ConvertContext):
    # run_subgraph takes numpy values in ``inputs`` as constants of that invocation (C2's Loop unrolling)
    const_subgraph_inputs = True

    def __init__(self, runner: "GraphRunner", scope: _Scope):
        self.runner = runner
        self.scope = scope
        self.opset = runner.opset

    def const(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        return self.scope.const(name)

    def shape(self, name: str) -> tuple[int, ...] | None:
        c = self.const(name)
        if c is not None:
            return tuple(c.shape)
        try:
            return tuple(as_dim(d) for d in self.scope.get(name).shape)  # a data-sized dim stays a SymInt
        except KeyError:
            return None

    def dtype(self, name: str) -> np.dtype | None:
        c = self.const(name)
        if c is not None:
            return c.dtype
        try:
            t = self.scope.get(name)
        except KeyError:
            return None
        return torch_to_numpy_dtype(t.dtype)

    def run_subgraph(self, graph, inputs: dict[str, Any], *, keep_consts: bool = False) -> list[Any]:
        return self.runner.run_graph(graph, inputs, parent=self.scope, keep_consts=keep_consts)


class GraphRunner:
    """Runs ONNX graphs node by node with the registered converters.

    ``building=True``: eager run on real inputs; folds constants into ``folded`` (main graph) and
    ``sub_folded`` (subgraph invocations, in call order), records which main-graph nodes to keep.
    ``building=False``: replays the plan: kept nodes only, folded values from the caches.
    """

    def __init__(self, opset: int, *, building: bool):
        self.opset = opset
        self.building = building
        self.folded: dict[str, np.ndarray] = {}
        self.sub_folded: list[dict[str, np.ndarray]] = []
        self.kept: list[OnnxNode] = []
        self.missing: Counter = Counter()
        self.converted: Counter = Counter()
        # (op type, name) of the main-graph node -> nodes kept under it: a Loop's body once per unrolled step
        self.converted_under: Counter = Counter()
        self._top: tuple[str, str] | None = None  # the main-graph node running now
        self.folded_ops: Counter = Counter()
        self._sub_calls = 0
        self.record: dict[str, Any] | None = None  # name -> value, when recording every tensor
        self.buffer_of: dict[str, Any] = {}  # folded/initializer name -> registered tensor (forward)
        # Sizes the data decides (data_sizes.py), main graph: tensors whose shape may move with the values,
        # the size values computed from their shapes, and the kept nodes that compute those (by identity).
        self.dynamic: set[str] = set()
        self.sizes: set[str] = set()
        self.size_nodes: set[int] = set()

    # ---- one node ------------------------------------------------------------------------
    def _inputs(self, node: OnnxNode, scope: _Scope) -> list[Any]:
        vals = []
        for name in node.inputs:
            if not name:
                vals.append(None)
                continue
            c = scope.const(name)
            if c is not None and (name in self.sizes or c.dtype == object):
                vals.append(size_tensor(c))  # a size read as data: int64 tensor, symbolic where the data decides
            elif c is not None:
                t = self.buffer_of.get(name) if scope.parent is None else None
                vals.append(t if t is not None else to_torch(c))
            else:
                vals.append(scope.get(name))
        return vals

    def _foldable(self, node: OnnxNode, scope: _Scope) -> bool:
        if node.op_type in _NEVER_FOLD or any(n in self.sizes for n in node.inputs if n):
            return False
        if node.op_type in _SHAPE_OPS and node.domain == "":
            return bool(node.inputs) and self._has_value(node.inputs[0], scope)
        if not all((not n) or scope.const(n) is not None for n in node.inputs):
            return False
        # If/Loop/Scan: their bodies may read outer values that are not constants
        return all(scope.const(n) is not None for n in _subgraph_outer_reads(node))

    @staticmethod
    def _has_value(name: str, scope: _Scope) -> bool:
        if scope.const(name) is not None:
            return True
        try:
            scope.get(name)
            return True
        except KeyError:
            return False

    def _call(self, node: OnnxNode, scope: _Scope, inputs: list[Any]):
        fn = find_converter(node.domain, node.op_type, self.opset if node.domain == "" else 1)
        if fn is None:
            return None
        out = fn(_Context(self, scope), node, inputs)
        if not isinstance(out, (list, tuple)):
            out = [out]
        return list(out)

    def _fold(self, node: OnnxNode, scope: _Scope) -> list[np.ndarray]:

        inputs = self._inputs(node, scope)
        out = None
        with torch.no_grad():
            try:
                out = self._call(node, scope, inputs)
            except UnsupportedNode:
                out = None
        if out is None:  # no converter: the ONNX reference evaluates constant nodes
            return _reference_eval(node, [scope.const(n) if n else None for n in node.inputs], self.opset)
        return [None if o is None else _as_numpy(o) for o in out]

    def _data_sized_why(self, node: OnnxNode) -> str:
        """Why a node reading a value the data sizes could not convert, when it reads one."""
        if not any(n in self.dynamic for n in node.inputs if n):
            return ""
        return (" (it reads a value computed from a size the data decides, a NonZero's count: the converter carries "
                f"that size as a symbol through Shape/Size and {', '.join(sorted(SIZE_OPS))}, and into the torch "
                "ops that take sizes, but a value that decides on it, such as a comparison feeding a shape, has "
                "no form torch.export can trace)")

    def _is_size_node(self, node: OnnxNode, scope: _Scope) -> bool:
        """At build time: a Shape/Size of a data-sized tensor, or shape arithmetic on a size (data_sizes.py)."""
        if node.domain != "" or not node.inputs:
            return False
        if node.op_type in _SHAPE_OPS:
            return node.inputs[0] in self.dynamic
        return (node.op_type in SIZE_OPS and any(n in self.sizes for n in node.inputs if n)
                and all((not n) or scope.const(n) is not None for n in node.inputs))

    def _run_size_node(self, node: OnnxNode, scope: _Scope) -> None:
        if node.op_type in _SHAPE_OPS:
            dims = scope.get(node.inputs[0]).shape
            outs = [shape_value([math.prod(dims)] if node.op_type == "Size" else dims)]
            if node.op_type == "Shape":
                outs = [outs[0][slice(node.attrs.get("start", 0), node.attrs.get("end", len(dims)))]]
            else:
                outs = [outs[0].reshape(())]
        else:
            try:
                outs = size_values(node, [scope.const(n) if n else None for n in node.inputs])
            except (ValueError, IndexError, TypeError) as e:
                raise ConversionError(f"{node.op_type} node {node.name!r} computes on a size the data decides "
                                      f"(a NonZero's count): {e}", node) from e
        for name, v in zip(node.outputs, outs):
            if name:
                scope.consts[name] = v
                if self.record is not None:
                    self.record[name] = size_tensor(v)

    def run_node(self, node: OnnxNode, scope: _Scope, *, main: bool) -> None:

        if main:
            self._top = (node.op_type, node.name)
        if main and (id(node) in self.size_nodes or (self.building and self._is_size_node(node, scope))):
            # evaluated at every forward, on SymInts under torch.export: never folded to the build's numbers
            self._run_size_node(node, scope)
            if self.building:
                self.size_nodes.add(id(node))
                self.sizes.update(o for o in node.outputs if o)
                self.kept.append(node)
            return
        if main and not self.building:
            pass  # forward replays only kept nodes; folded ones are never visited
        elif self._foldable(node, scope):
            if node.op_type in _SHAPE_OPS:
                outs = [self._shape_op(node, scope)]
            else:
                try:
                    outs = self._fold(node, scope)
                except ConversionError:  # no converter and no tensor from the reference (a Sequence)
                    if not self.building:
                        raise
                    self.missing[_missing_key(node.domain, node.op_type, self.opset)] += 1
                    raise _StopBuild(node) from None
            for name, v in zip(node.outputs, outs):
                if name and v is not None:
                    scope.consts[name] = np.asarray(v)
                    if self.record is not None:
                        self.record[name] = to_torch(v) if np.asarray(v).dtype.kind not in "OSU" else v
            self.folded_ops[node.op_type] += 1
            return
        inputs = self._inputs(node, scope)
        try:

            # onnx_top: the main-graph node; the nodes of a Loop/If/Scan body keep their enclosing node
            # there (annotate merges), so a graph-size count can charge an unrolled body to its Loop
            top = {"onnx_top": node.name, "onnx_top_op": node.op_type} if main else {}
            with annotate({"onnx_node": node.name, "onnx_op": node.op_type, "onnx_outputs": ",".join(node.outputs),
                           **top}):
                out = self._call(node, scope, inputs)
        except UnsupportedNode as e:
            raise ConversionError(f"{node.op_type} node {node.name!r}: {e}{self._data_sized_why(node)}", node) from e
        except (MissingConverters, ConversionError, _StopBuild):
            raise
        except Exception as e:  # noqa: BLE001 - name the node that failed
            raise ConversionError(f"{node.op_type} node {node.name!r} failed to convert: "
                                  f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}",
                                  node) from e
        if out is None:
            if not self.building:
                raise ConversionError(f"no converter for {node.op_type}", node)
            self.missing[_missing_key(node.domain, node.op_type, self.opset)] += 1
            # keep going with the ONNX reference's numbers so that every missing op is found in one run
            arrays = [None if v is None else _as_numpy(v) for v in inputs]
            try:
                out = [None if o is None else to_torch(o) for o in _reference_eval(node, arrays, self.opset)]
            except ConversionError:
                raise _StopBuild(node) from None
        self.converted[node.op_type] += 1
        self.converted_under[self._top or (node.op_type, node.name)] += 1
        if main and self.building:
            self.kept.append(node)
            if node.op_type in DATA_SIZED_OPS or any(n in self.dynamic or n in self.sizes for n in node.inputs if n):
                self.dynamic.update(o for o in node.outputs if o)
        for name, v in zip(node.outputs, out):
            if name and v is not None:
                if not isinstance(v, torch.Tensor):
                    v = torch.as_tensor(v)
                scope.values[name] = v
                if self.record is not None:
                    self.record[name] = v

    def _shape_op(self, node: OnnxNode, scope: _Scope) -> np.ndarray:
        c = scope.const(node.inputs[0])
        shape = list(c.shape) if c is not None else [int(d) for d in scope.get(node.inputs[0]).shape]
        if node.op_type == "Size":
            return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
        rank = len(shape)
        start = node.attrs.get("start", 0)
        end = node.attrs.get("end", rank)
        return np.array(shape[slice(start, end)], dtype=np.int64)

    # ---- graphs ----------------------------------------------------------------------------
    def run_graph(self, graph, inputs: dict[str, Any], *, parent: _Scope | None, keep_consts: bool = False) -> list[Any]:
        """A subgraph invocation (If branch, Loop body): outer names visible, folds cached per call.
        ``keep_consts``: an output the call folded comes back as numpy (a Loop's carried counter)."""
        from onnx import numpy_helper

        scope = _Scope(parent=parent)
        call = self._sub_calls
        self._sub_calls += 1
        if self.building:
            for init in graph.initializer:
                scope.consts[init.name] = numpy_helper.to_array(init)
        else:
            scope.consts.update(self.sub_folded[call])
        for name, v in inputs.items():
            if isinstance(v, (np.ndarray, np.generic)):
                scope.consts[name] = np.asarray(v)  # a per-call constant (an unrolled Loop's iteration number)
            else:
                scope.values[name] = v
        for raw in graph.node:
            node = onnx_node(raw)
            if not self.building and all(o in scope.consts for o in node.outputs if o):
                continue  # folded at build time
            self.run_node(node, scope, main=False)
        if self.building:
            self.sub_folded.append(dict(scope.consts))
        outs = []
        for o in graph.output:
            c = scope.const(o.name)
            outs.append((c if keep_consts else to_torch(c)) if c is not None else scope.get(o.name))
        return outs

    def reset(self) -> None:
        self._sub_calls = 0


def _missing_key(domain: str, op_type: str, opset: int) -> tuple[str, str, int]:
    """(domain, op, version) of a node without converter; the registry keys other domains at 1."""
    return ("ai.onnx" if is_onnx_domain(domain) else domain), op_type, opset if is_onnx_domain(domain) else 1


def _count_missing(raw, opset: int, missing: Counter) -> None:
    """Count ``raw`` and the nodes of its subgraphs that have no converter."""
    key = _missing_key(raw.domain, raw.op_type, opset)
    if find_converter(raw.domain, raw.op_type, key[2]) is None:
        missing[key] += 1
    for a in raw.attribute:
        if a.HasField("g"):
            for n in a.g.node:
                _count_missing(n, opset, missing)


def _reference_eval(node: OnnxNode, arrays: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Evaluate one node with onnx's reference implementation (constant folding of rare ops)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if a is not None else "" for k, a in enumerate(arrays)]
    outs = [f"o{k}" if o else "" for k, o in enumerate(node.outputs)]
    attrs = {k: v for k, v in node.attrs.items()}
    proto = helper.make_node(node.op_type, names, outs, domain=node.domain, **_attr_protos(attrs))
    graph = helper.make_graph(
        [proto], "fold", [helper.make_empty_tensor_value_info(n) for n in names if n],
        [helper.make_empty_tensor_value_info(o) for o in outs if o])
    opsets = [helper.make_opsetid("", opset)]
    if node.domain:
        opsets.append(helper.make_opsetid(node.domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    feeds = {n: a for n, a in zip(names, arrays) if n}
    try:
        res = ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:  # noqa: BLE001
        raise ConversionError(f"no converter for {node.domain + '.' if node.domain else ''}{node.op_type} "
                              f"and the ONNX reference cannot evaluate it ({type(e).__name__})", node) from e
    if any(isinstance(r, (list, tuple)) for r in res):  # a Sequence value: no tensor to carry on with
        raise ConversionError(f"no converter for {node.domain + '.' if node.domain else ''}{node.op_type}, "
                              "and its value is a sequence, which a torch graph does not hold", node)
    it = iter(res)
    return [np.asarray(next(it)) if o else None for o in outs]


def _attr_protos(attrs: dict[str, Any]) -> dict[str, Any]:
    from onnx import numpy_helper

    out = {}
    for k, v in attrs.items():
        if isinstance(v, np.ndarray):
            out[k] = numpy_helper.from_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], np.ndarray):
            out[k] = [numpy_helper.from_array(x) for x in v]
        else:
            out[k] = v
    return out


# ASCII only: Python folds identifiers by NFKC ("ﬁx" is "fix", a duplicate argument) and refuses
# some word characters ("²x"); capped, because torch.export's unlifting runs a backtracking regex
# over each parameter name (a 200 KB input name held the PT2E path for minutes).
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
MAX_PARAM_NAME = 64


def _attr_name(onnx_name: str, taken: set[str]) -> str:
    base = "w_" + _NOT_IDENT.sub("_", onnx_name)[:80]
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


@dataclass
class BuildResult:
    module: Any  # OnnxModule
    converted: Counter  # op_type -> nodes kept as torch ops
    folded: Counter  # op_type -> nodes folded to constants
    record: dict[str, Any]  # unused (parity localizes with record_values on the failing feed)
    converted_under: Counter = field(default_factory=Counter)  # (op type, name) of a main-graph node -> kept


def build_module(model, input_names: list[str], example: dict[str, np.ndarray], *,
                 baked: dict[str, np.ndarray] | None = None) -> BuildResult:
    """The OnnxModule for a specialized ``model`` (static input shapes), built by one eager run.

    ``example``: one feed per non-baked graph input; ``baked``: inputs folded in as constants.
    Raises MissingConverters (all missing ops at once) or ConversionError (the node that failed).
    """
    from onnx import numpy_helper

    opset = ai_onnx_opset(model, 1)
    runner = GraphRunner(opset, building=True)
    scope = _Scope()
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    scope.consts.update(inits)
    for name, value in (baked or {}).items():
        scope.consts[name] = np.asarray(value)
    graph_inputs = [i.name for i in model.graph.input if i.name not in scope.consts]
    for name in graph_inputs:
        scope.values[name] = to_torch(example[name])
    nodes = list(model.graph.node)
    outputs = [o.name for o in model.graph.output]
    parsed = fused_linear_bias([onnx_node(raw) for raw in nodes], scope.consts, set(outputs))
    frees = _frees_after(parsed, set(outputs))
    with torch.no_grad():
        for k, node in enumerate(parsed):
            try:
                runner.run_node(node, scope, main=True)
            except _StopBuild:
                # the rest of the graph cannot run: list its missing ops from the registry alone
                for rest in nodes[k + 1:]:
                    _count_missing(rest, opset, runner.missing)
                break
            _free(scope, frees[k])
    if runner.missing:
        raise MissingConverters(runner.missing)
    for name in runner.sizes:  # computed again at every forward: no buffer holds the build's numbers
        scope.consts.pop(name, None)
    module = _module_class(input_names)(runner, scope.consts, input_names, graph_inputs, outputs)
    return BuildResult(module=module, converted=runner.converted, folded=runner.folded_ops,
                       record={}, converted_under=runner.converted_under)


def python_names(input_names: list[str]) -> list[str]:
    """Identifiers for forward's parameters, one per model input: the input's own name where it is
    one ("input.1" -> "input_1", "images:0" -> "images_0", "1" -> "in_1"), unique."""
    out: list[str] = []
    for name in input_names:
        py = _NOT_IDENT.sub("_", name)[:MAX_PARAM_NAME] or "in"
        if py[0].isdigit() or keyword.iskeyword(py) or py.startswith("_") or py == "self":
            py = "in_" + py.lstrip("_")
        base, i = py, 1
        while py in out:
            py, i = f"{base}_{i}", i + 1
        out.append(py)
    return out


def _module_class(input_names: list[str]):
    """A subclass whose forward has one named parameter per model input: torch.export names its
    placeholders (and so the PT2E file's graph inputs) after them; pt2e.py renames the file's
    inputs back where python_names had to change a name."""
    params = python_names(input_names)

    namespace: dict[str, Any] = {"OnnxModule": OnnxModule}
    exec(f"def forward(self, {', '.join(params)}):\n    return OnnxModule.forward(self, {', '.join(params)})\n",
         namespace)
    return type("OnnxGraphModule", (OnnxModule, torch.nn.Module), {"forward": namespace["forward"]})


class OnnxModule:
    """forward(*all model inputs in order) -> tuple of the graph outputs (one tensor if one output).

    A mixin: the class built is (OnnxModule, torch.nn.Module), made when a module is built so that
    importing this file does not import torch (the API process never does)."""

    def __init__(self, runner: GraphRunner, consts: dict[str, np.ndarray], input_names: list[str],
                 graph_inputs: list[str], outputs: list[str]):

        super().__init__()
        self._runner = runner
        self._plan = list(runner.kept)
        self._input_names = list(input_names)
        self._graph_inputs = set(graph_inputs)
        self._outputs = list(outputs)
        self.onnx_names: dict[str, str] = {}  # attribute name -> ONNX tensor name
        needed = {n for node in self._plan for n in node.inputs if n} | set(outputs)
        needed |= _outer_names(self._plan)
        taken: set[str] = set()
        self._consts = {}
        for name, value in consts.items():
            if name not in needed:
                continue
            t = to_torch(value)
            attr = _attr_name(name, taken)
            if t.is_floating_point():
                self.register_parameter(attr, torch.nn.Parameter(t, requires_grad=False))
            else:
                self.register_buffer(attr, t)
            self.onnx_names[attr] = name
            self._consts[name] = value
        runner.building = False
        runner.record = None
        self._frees = _frees_after(self._plan, set(outputs))

    def forward(self, *args):
        runner = self._runner
        runner.reset()
        scope = _Scope()
        scope.consts.update(self._consts)
        runner.buffer_of = {onnx: getattr(self, attr) for attr, onnx in self.onnx_names.items()}
        for name, value in zip(self._input_names, args):
            if name in self._graph_inputs:
                scope.values[name] = value
        for node, frees in zip(self._plan, self._frees):
            runner.run_node(node, scope, main=True)
            _free(scope, frees)
        outs = []
        for name in self._outputs:
            if name in runner.sizes:
                outs.append(size_tensor(scope.consts[name]))
            elif name in scope.consts:
                outs.append(runner.buffer_of[name])
            else:
                outs.append(scope.get(name))
        return outs[0] if len(outs) == 1 else tuple(outs)


def fused_linear_bias(nodes: list[OnnxNode], consts: dict[str, np.ndarray], keep: set[str]) -> list[OnnxNode]:
    """``nodes`` with each MatMul(x, W) whose one reader is Add(y, b) made one node (ops/math.py,
    ``MatMulAdd``): W a constant 2-D float weight, b a constant 1-D float bias of W's N columns, y
    read by nothing else (no other node, no subgraph, not a graph output). Named and annotated as the
    Add (the PT2E file's tensor keeps the Add's name); the MatMul's own output is then not computed."""
    readers: Counter = Counter()
    for node in nodes:
        for name in {*node.inputs, *_subgraph_outer_reads(node)}:
            if name:
                readers[name] += 1
    producer = {o: k for k, node in enumerate(nodes) for o in node.outputs if o}
    fused: dict[int, OnnxNode] = {}
    dropped: set[int] = set()
    for k, add in enumerate(nodes):
        if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
            continue
        for y, b in (add.inputs, add.inputs[::-1]):
            m = producer.get(y)
            matmul = nodes[m] if m is not None else None
            if (matmul is None or matmul.op_type != "MatMul" or matmul.domain != "" or readers[y] != 1 or y in keep
                    or b not in consts):
                continue
            w, bias = consts.get(matmul.inputs[1]), consts[b]
            if (w is None or w.ndim != 2 or w.dtype.kind != "f" or bias.ndim != 1 or bias.dtype != w.dtype
                    or bias.shape[0] != w.shape[1]):
                continue
            fused[k] = OnnxNode(op_type="MatMulAdd", domain=FUSED_DOMAIN, name=add.name,
                                inputs=(matmul.inputs[0], matmul.inputs[1], b), outputs=add.outputs)
            dropped.add(m)
            break
    return [fused.get(k, node) for k, node in enumerate(nodes) if k not in dropped]


def _frees_after(nodes: list[OnnxNode], keep: set[str]) -> list[list[str]]:
    """Per node, the values it is the last to read (subgraph reads from the enclosing scope count),
    outside ``keep``: dropped once it has run, so an eager run holds its live tensors, not every
    tensor of the network (a 960x960 detector's parity run held all 1.5 GB of its activations)."""
    last: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for name in (*node.inputs, *_subgraph_outer_reads(node)):
            if name:
                last[name] = k
    out: list[list[str]] = [[] for _ in nodes]
    for name, k in last.items():
        if name not in keep:
            out[k].append(name)
    return out


def _free(scope: _Scope, names: list[str]) -> None:
    for name in names:
        scope.values.pop(name, None)  # constants stay: the module's plan is built from scope.consts


def record_values(module, feed: dict[str, np.ndarray]) -> dict[str, Any]:
    """Every tensor the module's kept nodes compute on ``feed`` (ONNX name -> torch value)."""

    runner = module._runner
    runner.record = {}
    try:
        with torch.no_grad():
            module(*[to_torch(feed[n]) for n in module._input_names])
        return runner.record
    finally:
        runner.record = None


def _subgraph_outer_reads(node: OnnxNode) -> set[str]:
    """Names a node's subgraphs read that they do not define themselves."""
    graphs = [v for v in node.attrs.values() if hasattr(v, "node") and hasattr(v, "initializer")]
    if not graphs:
        return set()
    reads: set[str] = set()

    def visit(graph, defined: set[str]):
        defined = defined | {i.name for i in graph.input} | {i.name for i in graph.initializer}
        for n in graph.node:
            reads.update(i for i in n.input if i and i not in defined)
            for a in n.attribute:
                if a.HasField("g"):
                    visit(a.g, defined)
            defined |= set(n.output)

    for g in graphs:
        visit(g, set())
    return reads


def _outer_names(plan: list[OnnxNode]) -> set[str]:
    """Names subgraphs of kept nodes read from the enclosing scope."""
    names: set[str] = set()

    def visit(graph):
        for n in graph.node:
            names.update(i for i in n.input if i)
            for a in n.attribute:
                if a.g is not None and a.HasField("g"):
                    visit(a.g)
                for g in a.graphs:
                    visit(g)

    for node in plan:
        for v in node.attrs.values():
            if hasattr(v, "node") and hasattr(v, "initializer"):
                visit(v)
    return names
