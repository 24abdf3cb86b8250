"""If, Loop and Scan without control flow in the torch graph: the number of iterations is known
at conversion time and the body is unrolled; an If keeps only its taken branch, or both branches
and a select (torch.export would otherwise need torch.cond / while_loop with data-dependent
predicates, which PT2E does not quantize through).

- If: when the condition folds to a constant (after specialization it usually does: a flag input
  fixed by the calibration data, a comparison of static shapes), only that branch is converted.
  A data-dependent condition is converted when both branches give outputs of the same shapes and
  dtypes: both run, ``torch.where`` selects (exact, at the cost of computing both).
- Loop: the trip count M must fold, the initial condition must be absent or fold, and the body
  must have no data-dependent exit: its condition output is the condition input passed through
  (possibly via Identity) or a constant. Then the body is run M times (or 0 times when the initial
  condition is false), loop-carried values threaded through, scan outputs stacked on a new axis 0.
  A small integer carried value that starts constant and is updated from constants (a counter the
  body slices with, as paddle2onnx writes) is a constant of each unrolled copy, like the iteration
  number.
  A condition computed from static values only (the iteration number, constants and outer names
  the converter folds, loop-carried values that start constant and are updated from static values:
  tf2onnx's ``And(Less(i, n), Less(counter + 1, n))`` of a Keras LSTM) is run ahead with onnx's
  reference evaluator, and the body is unrolled up to the exit it gives.
- Scan (opset 9+): the number of iterations is the static length of the scan inputs, so it is
  always unrolled: each step reads slice t (or len-1-t for a reverse input) of every scan input,
  state threaded through, scan outputs stacked on their axis (reversed for a reverse output).
Anything else raises UnsupportedNode naming the node and the reason.
"""
from __future__ import annotations

import numpy as np
import torch


from ..module import to_torch
from ..op_sets import RANDOM_OPS, is_onnx_domain
from ..registry import ConvertContext, OnnxNode, UnsupportedNode, converter

# Each iteration copies the body into the torch graph; past this the graph (and export time)
# grows beyond what a conversion should cost.
MAX_UNROLL = 1024


@converter("If", since=1)
def if_(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    cond = ctx.const(node.inputs[0])
    if cond is None:
        return _if_on_data(ctx, node, inputs[0])
    flag = np.asarray(cond).ravel()
    if flag.size != 1:
        raise UnsupportedNode(f"If {node.name!r}: condition of {flag.size} elements")
    branch = node.attrs["then_branch" if bool(flag[0]) else "else_branch"]
    return ctx.run_subgraph(branch, {})


def _if_on_data(ctx: ConvertContext, node: OnnxNode, cond: torch.Tensor):
    """A data-dependent condition: both branches run and ``torch.where`` picks, which is the same
    function when the branches' outputs agree in shape and dtype (then neither branch has a side
    effect or a shape that depends on the choice). Shapes are static, so checking them on the
    conversion run holds for every run."""
    if cond is None or cond.numel() != 1:
        raise UnsupportedNode(f"If {node.name!r}: the condition {node.inputs[0]!r} is neither a constant nor "
                              "a one-element tensor")
    then_out = ctx.run_subgraph(node.attrs["then_branch"], {})
    else_out = ctx.run_subgraph(node.attrs["else_branch"], {})
    for k, (a, b) in enumerate(zip(then_out, else_out)):
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            raise UnsupportedNode(f"If {node.name!r}: the condition {node.inputs[0]!r} depends on the input data "
                                  f"and the branches' output {k} differ ({tuple(a.shape)} {a.dtype} vs "
                                  f"{tuple(b.shape)} {b.dtype}), so both cannot be computed and selected")
    flag = cond.reshape(()).to(torch.bool)
    return [torch.where(flag, a, b) for a, b in zip(then_out, else_out)]


def _static_condition(body) -> bool | None:
    """True when the body's condition output is its condition input (through Identity nodes) or a
    constant true; False for a constant false; None when it is computed from data."""
    from onnx import helper, numpy_helper

    cond_in, name = body.input[1].name, body.output[0].name
    producers = {o: n for n in body.node for o in n.output}
    inits = {i.name: i for i in body.initializer}
    for _ in range(len(body.node) + 1):
        if name == cond_in:
            return True
        if name in inits:
            return bool(np.asarray(numpy_helper.to_array(inits[name])).ravel()[0])
        node = producers.get(name)
        if node is None:
            return None  # from the enclosing scope: not provably static here
        if node.op_type == "Identity":
            name = node.input[0]
            continue
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    return bool(np.asarray(numpy_helper.to_array(a.t)).ravel()[0])
                if a.name in ("value_int", "value_ints"):
                    return bool(np.asarray(helper.get_attribute_value(a)).ravel()[0])
        return None
    return None


def _static_part(ctx: ConvertContext, node: OnnxNode, body) -> tuple[list, list[int], dict] | None:
    """When the body's condition output depends on static values only, (the body nodes that compute
    static values, the indices of the loop-carried values among them, the outer constants they
    read); else None. Static: the iteration number, the condition input, constants (the body's, and
    outer names the converter folds) and loop-carried values whose initial value folds and whose
    update is static (a fixed point over the carried values)."""
    from onnx import AttributeProto

    names = [i.name for i in body.input]
    carried_in = names[2:]
    static_carried = {k for k, name in enumerate(node.inputs[2:]) if name and ctx.const(name) is not None}
    produced = {o for n in body.node for o in n.output}
    while True:
        static = {names[0], names[1], *(i.name for i in body.initializer), *(carried_in[k] for k in static_carried)}
        nodes, outer = [], {}
        for n in body.node:  # topological order
            # only ai.onnx ops: what the reference evaluator below runs (the model it builds imports ai.onnx alone)
            if (not is_onnx_domain(n.domain) or n.op_type in RANDOM_OPS
                    or any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in n.attribute)):
                continue
            reads = [i for i in n.input if i]
            folded = {i: ctx.const(i) for i in reads if i not in static and i not in produced and i not in names}
            if all(v is not None for v in folded.values()) and all(i in static or i in folded for i in reads):
                static.update(o for o in n.output if o)
                nodes.append(n)
                outer.update(folded)
        kept = {k for k in static_carried if body.output[1 + k].name in static}
        if kept == static_carried:
            return (nodes, sorted(kept), outer) if body.output[0].name in static else None
        static_carried = kept


def _iterations_until_exit(ctx: ConvertContext, node: OnnxNode, body, part, limit: int) -> int:
    """How many iterations run before the body's static condition output turns false (at most
    ``limit``), by running the static part of the body with onnx's reference evaluator: the count is
    the same for every input, so the unrolled graph has no exit to trace."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    nodes, carried, outer = part
    names = [i.name for i in body.input]
    outputs = [body.output[0].name] + [body.output[1 + k].name for k in carried]
    fed = [n for i, n in enumerate(names) if i < 2 or i - 2 in carried]
    graph = helper.make_graph(nodes, "static_exit", [helper.make_empty_tensor_value_info(n) for n in fed],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              list(body.initializer) + [numpy_helper.from_array(np.asarray(v), k) for k, v in outer.items()])
    values = {names[2 + k]: np.asarray(ctx.const(node.inputs[2 + k])) for k in carried}
    try:
        evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", ctx.opset)]))
        for i in range(limit):
            feeds = {names[0]: np.array(i, dtype=np.int64), names[1]: np.array(True), **values}
            outs = evaluator.run(None, {k: v for k, v in feeds.items() if k in fed})
            values = {names[2 + k]: v for k, v in zip(carried, outs[1:])}
            if not bool(np.asarray(outs[0]).ravel()[0]):
                return i + 1
    except Exception as e:  # noqa: BLE001 - a refusal that names the Loop, not the evaluator's traceback
        raise UnsupportedNode(f"Loop {node.name!r}: its exit condition reads only static values, but onnx's "
                              f"reference evaluator could not compute it ({type(e).__name__})") from e
    return limit


@converter("Loop", since=1)
def loop(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    body = node.attrs["body"]
    m_name = node.inputs[0] if node.inputs else ""
    c_name = node.inputs[1] if len(node.inputs) > 1 else ""
    trip = ctx.const(m_name) if m_name else None
    if m_name and trip is None:
        raise UnsupportedNode(f"Loop {node.name!r}: the trip count {m_name!r} depends on the input data")
    cond0 = ctx.const(c_name) if c_name else None
    if c_name and cond0 is None:
        raise UnsupportedNode(f"Loop {node.name!r}: the initial condition {c_name!r} depends on the input data")
    # ORT reads the body's condition output after every iteration, also in the "for" form
    # (no condition input), so it must be static in both forms
    keeps_going = _static_condition(body)
    part = _static_part(ctx, node, body) if keeps_going is None else None
    if keeps_going is None and part is None:
        raise UnsupportedNode(f"Loop {node.name!r}: the body's condition output {body.output[0].name!r} is "
                              "computed from data (a data-dependent exit)")
    if trip is None:
        raise UnsupportedNode(f"Loop {node.name!r}: no trip count and a condition that never turns false")
    iterations = int(np.asarray(trip).ravel()[0])
    if cond0 is not None and not bool(np.asarray(cond0).ravel()[0]):
        iterations = 0
    elif keeps_going is False:
        iterations = min(iterations, 1)  # a constant-false body condition stops after one pass
    elif part is not None:
        iterations = _iterations_until_exit(ctx, node, body, part, min(iterations, MAX_UNROLL + 1))
    if iterations > MAX_UNROLL:
        raise UnsupportedNode(f"Loop {node.name!r}: {iterations} iterations to unroll (limit {MAX_UNROLL})")

    # The iteration number is a constant of each unrolled copy: handed over as numpy when the core
    # folds constant subgraph inputs (then Slice/Gather on it in the body become static). So is a
    # small integer loop-carried value that starts constant and that the body updates from constants
    # (paddle2onnx indexes with such a counter, k_out = k_in + 1, instead of the iteration number);
    # a float or large carried value (weights passed through the loop) stays one tensor.
    as_const = bool(getattr(ctx, "const_subgraph_inputs", False))
    carried = list(inputs[2:])
    if as_const:
        carried = [c if c is not None and _index_like(np.asarray(c)) else t
                   for c, t in zip((ctx.const(n) if n else None for n in node.inputs[2:]), carried)]
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    names = [i.name for i in body.input]
    scans: list[list[torch.Tensor]] = [[] for _ in range(n_scan)]
    for i in range(iterations):
        if as_const:
            feeds = {names[0]: np.array(i, dtype=np.int64), names[1]: np.array(True)}
        else:
            feeds = {names[0]: torch.tensor(i, dtype=torch.int64), names[1]: torch.tensor(True)}
        feeds.update(zip(names[2:], carried))
        outs = ctx.run_subgraph(body, feeds, keep_consts=True) if as_const else ctx.run_subgraph(body, feeds)
        carried = [o if not isinstance(o, np.ndarray) or _index_like(o) else _tensor(o)
                   for o in outs[1:1 + n_carried]]
        for k, value in enumerate(outs[1 + n_carried:]):
            scans[k].append(_tensor(value))
    if n_scan and iterations == 0:
        raise UnsupportedNode(f"Loop {node.name!r}: zero iterations with scan outputs (their element shape "
                              "is unknown)")
    return [_tensor(c) for c in carried] + [torch.stack(s, 0) for s in scans]


def _index_like(a: np.ndarray) -> bool:
    """An integer or bool value of at most 64 elements: a counter or index a body may slice with."""
    return a.dtype.kind in "biu" and a.size <= 64


def _tensor(v):
    return to_torch(np.asarray(v)) if isinstance(v, (np.ndarray, np.generic)) else v


@converter("Scan", since=9)
def scan(ctx: ConvertContext, node: OnnxNode, inputs: list[torch.Tensor | None]):
    body = node.attrs["body"]
    m = int(node.attrs["num_scan_inputs"])
    n_state = len(inputs) - m
    states, xs = list(inputs[:n_state]), inputs[n_state:]
    in_axes = [int(a) for a in node.attrs.get("scan_input_axes", [0] * m)]
    in_dirs = [int(d) for d in node.attrs.get("scan_input_directions", [0] * m)]
    n_out = len(body.output) - n_state
    out_axes = [int(a) for a in node.attrs.get("scan_output_axes", [0] * n_out)]
    out_dirs = [int(d) for d in node.attrs.get("scan_output_directions", [0] * n_out)]
    in_axes = [a % x.dim() for a, x in zip(in_axes, xs)]
    lengths = {int(x.shape[a]) for a, x in zip(in_axes, xs)}
    if len(lengths) != 1:
        raise UnsupportedNode(f"Scan {node.name!r}: scan inputs of different lengths {sorted(lengths)}")
    steps = lengths.pop()
    if steps > MAX_UNROLL:
        raise UnsupportedNode(f"Scan {node.name!r}: {steps} iterations to unroll (limit {MAX_UNROLL})")
    if steps == 0 and n_out:
        raise UnsupportedNode(f"Scan {node.name!r}: empty scan inputs with scan outputs")
    names = [i.name for i in body.input]
    collected: list[list[torch.Tensor]] = [[] for _ in range(n_out)]
    for t in range(steps):
        feeds = dict(zip(names[:n_state], states))
        for name, x, axis, d in zip(names[n_state:], xs, in_axes, in_dirs):
            feeds[name] = x.select(axis, steps - 1 - t if d else t)
        outs = ctx.run_subgraph(body, feeds)
        states = list(outs[:n_state])
        for k, value in enumerate(outs[n_state:]):
            collected[k].append(value)
    stacked = []
    for values, axis, d in zip(collected, out_axes, out_dirs):
        if d:
            values = values[::-1]
        stacked.append(torch.stack(values, axis % (values[0].dim() + 1)))
    return states + stacked
