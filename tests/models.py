"""Tiny ONNX models the suite builds again and again, by name: ``build(name, **kw)`` returns an
``onnx.ModelProto`` and ``save(name, path, **kw)`` writes one.

Each builder takes as keywords what a test depends on (tensor and node names, shapes, dtype, opset,
IR version, weights) and is deterministic: weights are ``np.random.default_rng(seed)`` draws in a
fixed order, or the array a test passes. ``ir=None`` keeps onnx's default IR version.

Only shapes built in several places live here, plus the two pieces the per-file builders share:
``from_nodes`` (a model from its nodes) and ``branch`` (a one-node If body). A graph that documents
one case stays inline in its test.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT

Shape = Sequence[int | str] | None
Value = onnx.ValueInfoProto | tuple


def value(name: str, shape: Shape = None, elem: int = FLOAT) -> onnx.ValueInfoProto:
    """A tensor's ValueInfo: ``shape`` None leaves the shape out; dims may be names."""
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def _value(v: Value) -> onnx.ValueInfoProto:
    return v if isinstance(v, onnx.ValueInfoProto) else value(*v)


def from_nodes(nodes, inputs: Sequence[Value], outputs: Sequence[Value], initializers=(), *, opset: int = 17,
               ir: int | None = None, name: str = "g", **graph_kw) -> onnx.ModelProto:
    """A model of ``nodes`` importing the default domain at ``opset``. ``inputs`` and ``outputs`` are
    ValueInfoProtos or ``(name, shape[, elem])``; ``initializers`` TensorProtos or ``{name: array}``."""
    if isinstance(initializers, dict):
        initializers = [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items()]
    g = helper.make_graph(list(nodes), name, [_value(v) for v in inputs], [_value(v) for v in outputs],
                          initializer=list(initializers), **graph_kw)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if ir is not None:
        model.ir_version = ir
    return model


def branch(op: str, inputs: Sequence[str], out: str, shape: Shape = None, *, elem: int = FLOAT,
           node: str | None = None, **attrs) -> onnx.GraphProto:
    """An If branch of one node, ``op(inputs) -> out``, reading the outer scope (no inputs of its own)."""
    return helper.make_graph([helper.make_node(op, list(inputs), [out], name=node, **attrs)], out, [],
                             [value(out, shape, elem)])


def _np_dtype(elem: int):
    return helper.tensor_dtype_to_np_dtype(elem)


def _normal(rng: np.random.Generator, shape, scale: float, dtype) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _names(names: Sequence[str], count: int) -> list[str | None]:
    return [*names, *[None] * (count - len(names))]


def unary(op: str | Sequence[str] = "Relu", *, shape: Shape = (1, 4), elem: int = FLOAT, x: str = "x", y: str = "y",
          y_shape: Shape = None, node: str | None = None, opset: int = 17, ir: int | None = None,
          **attrs) -> onnx.ModelProto:
    """x -> op -> y, ``y_shape`` the input's unless given. A list of ops is a chain (the tensors between
    are t0, t1, ...); ``node`` names the last node, ``attrs`` are its attributes."""
    ops = [op] if isinstance(op, str) else list(op)
    tensors = [x, *[f"t{k}" for k in range(len(ops) - 1)], y]
    nodes = [helper.make_node(o, [tensors[k]], [tensors[k + 1]]) for k, o in enumerate(ops[:-1])]
    nodes.append(helper.make_node(ops[-1], [tensors[-2]], [y], name=node, **attrs))
    return from_nodes(nodes, [value(x, shape, elem)], [value(y, shape if y_shape is None else y_shape, elem)],
                      opset=opset, ir=ir)


def matmul(*, x_shape: Shape = (1, 8), w: Sequence[int] | np.ndarray = (8, 4), act: str | None = None,
           scale: float = 1.0, seed: int = 0, elem: int = FLOAT, x: str = "x", y: str | onnx.ValueInfoProto = "y",
           w_name: str = "w", names: Sequence[str] = (), opset: int = 17, ir: int | None = None) -> onnx.ModelProto:
    """x @ w [-> act] -> y (the MatMul's output is h before an act). ``w`` a shape draws a standard
    normal weight times ``scale`` of ``elem``'s dtype; an array is used as is. ``names`` names the
    nodes in order; ``y`` may be a ValueInfoProto (a type but no shape, or neither)."""
    if not isinstance(w, np.ndarray):
        w = _normal(np.random.default_rng(seed), tuple(w), scale, _np_dtype(elem))
    y_name = y.name if isinstance(y, onnx.ValueInfoProto) else y
    mm, act_name = _names(names, 2)
    nodes = [helper.make_node("MatMul", [x, w_name], ["h" if act else y_name], name=mm)]
    if act:
        nodes.append(helper.make_node(act, ["h"], [y_name], name=act_name))
    if not isinstance(y, onnx.ValueInfoProto):
        y = value(y, None if x_shape is None else [*x_shape[:-1], w.shape[1]], elem)
    return from_nodes(nodes, [value(x, x_shape, elem)], [y], [numpy_helper.from_array(w, w_name)], opset=opset, ir=ir)


def _conv_out(x_shape: Shape, cout: int, kernel: int, pads: int | None) -> list:
    p = pads or 0
    return [x_shape[0], cout, *[d + 2 * p - kernel + 1 for d in x_shape[2:]]]


def conv(*, x_shape: Shape = (1, 3, 8, 8), cout: int = 4, kernel: int = 3, pads: int | None = None,
         w: np.ndarray | None = None, bias: np.ndarray | None = None, bn: bool = False, act: str | None = None,
         scale: float = 1.0, seed: int = 0, elem: int = FLOAT, y_shape: Shape = None, names: Sequence[str] = (),
         listed: bool = False, opset: int = 17, ir: int | None = None) -> onnx.ModelProto:
    """x -> Conv(w[, b]) [-> BatchNormalization(g, b, m, v)] [-> act] -> y; the tensors between are c
    and n. The weight is a standard normal draw times ``scale`` unless ``w`` is given; the BN's
    parameters are drawn after it (g, v in [0.5, 1.5)). ``pads`` pads every side; ``y_shape`` is
    computed unless given (needed for named dims); ``names`` names the nodes in order; ``listed``
    also lists every initializer as a graph input (IR < 4's convention)."""
    rng = np.random.default_rng(seed)
    dtype = _np_dtype(elem)
    if w is None:
        w = _normal(rng, (cout, x_shape[1], kernel, kernel), scale, dtype)
    inits = [numpy_helper.from_array(w, "w")]
    if bias is not None:
        if bn:
            raise ValueError("a Conv bias beside a BatchNormalization: both would be named 'b'")
        inits.append(numpy_helper.from_array(bias, "b"))
    if bn:
        inits += [numpy_helper.from_array(v.astype(dtype), n) for n, v in (
            ("g", rng.random(cout) + 0.5), ("b", rng.standard_normal(cout)), ("m", rng.standard_normal(cout)),
            ("v", rng.random(cout) + 0.5))]
    ops = [("Conv", ["w", "b"] if bias is not None else ["w"], "c", {"pads": [pads] * 4} if pads is not None else {})]
    if bn:
        ops.append(("BatchNormalization", ["g", "b", "m", "v"], "n", {}))
    if act:
        ops.append((act, [], "", {}))
    nodes, prev = [], "x"
    for k, ((op, extra, out, attrs), name) in enumerate(zip(ops, _names(names, len(ops)))):
        out = "y" if k == len(ops) - 1 else out
        nodes.append(helper.make_node(op, [prev, *extra], [out], name=name, **attrs))
        prev = out
    inputs = [value("x", x_shape, elem)]
    if listed:
        inputs += [value(t.name, list(t.dims), elem) for t in inits]
    y_shape = _conv_out(x_shape, w.shape[0], w.shape[2], pads) if y_shape is None else y_shape
    return from_nodes(nodes, inputs, [value("y", y_shape, elem)], inits, opset=opset, ir=ir)


def conv_chain(layers: int, *, channels: int | Sequence[int] = 4, size: int = 8, kernel: int = 1,
               pads: int | None = None, bias: bool = True, act: str | None = "Relu", last_act: bool = True,
               fill: float | None = None, scale: float = 1.0, seed: int = 0, opset: int = 17,
               ir: int | None = None) -> onnx.ModelProto:
    """``layers`` x (Conv 'conv{i}'(w{i}[, b{i}]) -> c{i} -> act 'relu{i}' -> r{i}) on x [1, C0, size, size];
    ``channels`` is one count or C0..Cn. Weights are standard normal draws times ``scale`` (w0, b0,
    w1, ... in that order) or all ``fill``; ``last_act=False`` leaves the last layer's act out."""
    chans = [channels] * (layers + 1) if isinstance(channels, int) else list(channels)
    rng = np.random.default_rng(seed)
    nodes, inits, prev, out_size = [], [], "x", size
    for i in range(layers):
        shape = (chans[i + 1], chans[i], kernel, kernel)
        w = np.full(shape, fill, np.float32) if fill is not None else _normal(rng, shape, scale, np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        if bias:
            inits.append(numpy_helper.from_array(_normal(rng, chans[i + 1], scale, np.float32), f"b{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", *([f"b{i}"] if bias else [])], [f"c{i}"], name=f"conv{i}",
                                      **({"pads": [pads] * 4} if pads is not None else {})))
        prev, out_size = f"c{i}", out_size + 2 * (pads or 0) - kernel + 1
        if act and (last_act or i < layers - 1):
            nodes.append(helper.make_node(act, [prev], [f"r{i}"], name=f"{act.lower()}{i}"))
            prev = f"r{i}"
    return from_nodes(nodes, [value("x", [1, chans[0], size, size])], [value(prev, [1, chans[-1], out_size, out_size])],
                      inits, opset=opset, ir=ir)


def mlp(*, gemm: bool = False, sizes: Sequence[int] = (16, 32, 8), seed: int = 0, opset: int = 17,
        ir: int | None = None) -> onnx.ModelProto:
    """x -> MatMul 'mm1' + Add 'add1' (or the Gemm 'add1' quant_pre_process fuses them into) -> a1 ->
    Relu 'relu1' -> r1 -> MatMul 'mm2' + Add 'add2' -> y; weights w1, b1, w2, b2 drawn in that order."""
    rng = np.random.default_rng(seed)
    n_in, hidden, n_out = sizes
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (n_in, hidden)), ("b1", hidden), ("w2", (hidden, n_out)), ("b2", n_out))]
    first = ([helper.make_node("Gemm", ["x", "w1", "b1"], ["a1"], name="add1")] if gemm else
             [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
              helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1")])
    nodes = first + [helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
                     helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
                     helper.make_node("Add", ["m2", "b2"], ["y"], name="add2")]
    return from_nodes(nodes, [value("x", [1, n_in])], [value("y", [1, n_out])], inits, opset=opset, ir=ir)


def conv_gap_gemm(*, size: int = 32, seed: int = 42) -> onnx.ModelProto:
    """The quantizer trial's model (shared/notes/quantizers.md): x [1, 3, size, size] -> Conv 'conv1' (3 -> 8, pad 1)
    -> Relu 'relu1' -> Conv 'conv2' (8 -> 8, pad 1) -> GlobalAveragePool 'gap' -> Flatten 'flatten' -> Gemm 'fc'
    (8 -> 4, transB) -> y; weights from default_rng(seed), scaled 0.1 to 0.4."""
    rng = np.random.default_rng(seed)
    inits = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.4), "b1": rng.standard_normal(8) * 0.1,
             "w2": (rng.standard_normal((8, 8, 3, 3)) * 0.2), "b2": rng.standard_normal(8) * 0.1,
             "wf": (rng.standard_normal((4, 8)) * 0.4), "bf": rng.standard_normal(4) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc")]
    return from_nodes(nodes, [value("x", [1, 3, size, size])], [value("y", [1, 4])],
                      [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()], ir=8)


def sampler(*, seed: float | None = None) -> onnx.ModelProto:
    """A VAE-like sampler: Conv -> Relu (mu), then ``mu + RandomNormalLike(mu)`` (z), and the draw (eps)
    itself as a second output; the draw is unseeded unless ``seed`` is given."""
    rng = np.random.default_rng(0)
    noise = {"scale": 0.1, **({"seed": seed} if seed is not None else {})}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["mu"]), helper.make_node("RandomNormalLike", ["mu"], ["eps"], **noise),
             helper.make_node("Add", ["mu", "eps"], ["z"])]
    return from_nodes(nodes, [("x", [1, 3, 8, 8])], [("z", [1, 4, 8, 8]), ("eps", [1, 4, 8, 8])],
                      {"w": rng.normal(0, .3, (4, 3, 3, 3)).astype(np.float32)}, ir=8, name="vae")


def silu_convs(*, channels: int = 4, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    """Conv 'conv1' -> y, read twice (Sigmoid 'sig' and Mul 'mul': SiLU) -> Conv 'conv2': a tensor with two
    readers, whose Q/DQ pair QDQS8ToU8Transformer leaves int8 on x86 (advice's blocked nodes)."""
    rng = np.random.default_rng(seed)
    w = {f"w{i}": _normal(rng, (channels, channels, 3, 3), 0.3, np.float32) for i in (1, 2)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["y"], ["s"], name="sig"),
             helper.make_node("Mul", ["y", "s"], ["z"], name="mul"),
             helper.make_node("Conv", ["z", "w2"], ["out"], name="conv2", pads=[1, 1, 1, 1])]
    shape = [1, channels, size, size]
    return from_nodes(nodes, [("x", shape)], [("out", shape)], w)


BUILDERS: dict[str, Callable[..., onnx.ModelProto]] = {
    "unary": unary,
    "relu": partial(unary, "Relu"),
    "identity": partial(unary, "Identity"),
    "matmul": matmul,
    "matmul_relu": partial(matmul, act="Relu"),
    "conv": conv,
    "conv_relu": partial(conv, act="Relu"),
    "conv_bn": partial(conv, bn=True),
    "conv_bn_relu": partial(conv, bn=True, act="Relu"),
    "conv_chain": conv_chain,
    "mlp": mlp,
    "sampler": sampler,
    "silu_convs": silu_convs,
    "conv_gap_gemm": conv_gap_gemm,
}


def build(name: str, **kw) -> onnx.ModelProto:
    """The registry's model ``name`` built with ``kw`` (see each builder for its keywords)."""
    return BUILDERS[name](**kw)


def save(name: str, path: Path | str, **kw) -> Path | str:
    """``build(name, **kw)`` written to ``path``; returns ``path``."""
    onnx.save(build(name, **kw), str(path))
    return path
