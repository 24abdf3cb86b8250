"""The fp32 reference checked where ORT would refuse it, before any path runs.

An upload ORT refuses to load, or one it cannot run at the job's input shapes, would fail every
path and level with ORT's words four times over after minutes of quantizing, and a job without gates
would still read "passed"; the job stops once, in its fp32 stage, naming what ORT names.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from service.errors import BudgetExceeded, InvalidCalibration, InvalidModel, InvalidOptions, UnsupportedModel
from service.pipeline.inputs.safety.budgets import DEFAULT_BUDGETS, Budgets
from service.pipeline.inputs.samples import Samples
from service.pipeline.inputs.specs import InputSpec
from service.schemas.options import ComparisonOptions
from service.pipeline.isolation import first_line
from service.pipeline.ort.sessions import RunPastDeadline, run_within, session_for
from service.pipeline.vocabulary import all_nodes, graph_from_model


def refuse_if_fp32_cannot_run(path: Path, inferred, samples: Samples, shapes: dict[str, tuple[int, ...]],
                              specs: list[InputSpec], options: ComparisonOptions, *, model=None,
                              budgets: Budgets | None = None) -> None:
    """One session at disable_all (a type error onnx's checker, without its full check, lets through;
    a kernel ORT's CPU build lacks) and one fp32 inference on the first calibration sample (a fixed
    Reshape after a dim the user set). ``inferred``: the graph after shape inference at the job's
    shapes, for the types a missing kernel was asked for.

    Each inference is stopped past ``budgets.max_run_seconds`` (``run_within``). When ``model`` holds a
    Loop, every sample is run so: its trip count or exit may come from any sample's values (a range in
    options.input_values, an uploaded .npz), and a run that never ends would otherwise hang the
    calibrators and every level until the job's time limit (none in the CLI)."""
    limit = (budgets or DEFAULT_BUDGETS).max_run_seconds
    try:
        session = session_for(path, "disable_all")
    except Exception as e:  # noqa: BLE001 - ORT's refusal is the finding
        raise _load_refusal(e, inferred) from e
    feed = samples.calibration[0] if samples.calibration else None
    if feed is None:
        return
    try:
        run_within(session, feed, limit)
    except RunPastDeadline as e:
        raise _past_deadline(e.seconds, "the first calibration sample", feed, model, shapes) from e
    except Exception as e:  # noqa: BLE001 - ORT's words name the node
        said = first_line(e)[:500].rstrip(".")
        shown = ", ".join(f"{name}: {list(shape)}" for name, shape in shapes.items())
        uploaded = samples.info.source == "uploaded"
        chosen = bool(options.input_shapes) or any(isinstance(d, str) or d is None for s in specs for d in s.shape)
        if uploaded and not chosen:  # the shapes are the model's own: the uploaded values are what it refuses
            raise InvalidCalibration(
                f"The fp32 model does not run on the first uploaded calibration sample ({shown}, the shapes the model "
                f"declares): {said}. Every path and level would fail.",
                hint="upload an .npz of inputs the model takes (ids below the size of the table they index, indices "
                     "in range): run it in onnxruntime on one sample to see the same error") from e
        message = (f"The fp32 model does not run at the job's input shapes ({shown}): {said}. Every path and level "
                   "would fail.")
        if chosen:  # a dim was set by the options, the data or the batch default: the shapes are what to change
            raise InvalidOptions(message, hint="give options.input_shapes sizes the model accepts (a Reshape or "
                                 "Linear after a dynamic dim needs the size it was exported with), or upload an "
                                 ".npz of real inputs") from e
        raise InvalidModel(message, hint="the model fails at the shapes it declares: run it in onnxruntime on one "
                           "input to see the same error, fix the export and upload again") from e
    if model is None or not any(n.op_type == "Loop" for n in _every_node(model)):
        return
    rest = [("calibration sample", i, f) for i, f in enumerate(samples.calibration[1:], start=2)]
    rest += [("evaluation sample", i, f) for i, f in enumerate(samples.evaluation, start=1)]
    for kind, i, feed in rest:
        try:
            run_within(session, feed, limit)
        except RunPastDeadline as e:
            raise _past_deadline(e.seconds, f"{kind} {i}", feed, model, shapes) from e
        except Exception:  # noqa: BLE001 - as before: the levels report a sample ORT refuses, per file and level
            pass


def _every_node(model):
    """Every node of the graph, its bodies and its model-local functions (theirs too)."""
    yield from all_nodes(model.graph)
    for f in model.functions:
        yield from all_nodes(f)  # a FunctionProto holds .node as a graph does


def _past_deadline(seconds: float, which: str, feed: dict, model, shapes) -> BudgetExceeded:
    """The refusal of a job whose fp32 model ran one sample past ``seconds``, naming the Loops and the inputs
    their trip count and exit read, with those inputs' values in the sample."""
    shown = ", ".join(f"{name}: {list(shape)}" for name, shape in shapes.items())
    loops = _loops_and_their_inputs(model) if model is not None else []
    said = ""
    fed = sorted({i for _, names in loops for i in names})
    if loops:
        said = " " + "; ".join(
            f"Loop '{name}' takes its trip count or exit from input{'s' if len(names) > 1 else ''} "
            + ", ".join(f"'{n}'" + _value_words(feed.get(n)) for n in names) for name, names in loops if names) + "."
        said = said if said.strip(" .") else " It holds a Loop, whose trip count or exit may come from the values computed."
    bound = (f"give input_values that bound the loop (e.g. {{\"input_values\": {{\"{fed[0]}\": {{\"constant\": 16}}}}}} "
             "or a low/high range a real input holds)" if fed else
             "give input_values (or an .npz of real inputs) on which the model's loops end in a few steps" if loops else
             "run it at smaller input shapes (options.input_shapes)")
    return BudgetExceeded(
        f"The fp32 model did not finish one inference on {which} within {seconds:g} s at the job's input shapes "
        f"({shown}); ONNX Runtime stopped it in the fp32 stage, before any path ran.{said}",
        hint=(f"{bound}, or upload an .npz of real inputs; a model this slow per sample needs the operator to raise "
              "the budget 'max_run_seconds' (QUANTCOMPARE_BUDGET_MAX_RUN_SECONDS)"),
        budget="max_run_seconds", limit=seconds, stage="fp32")


def _value_words(value) -> str:
    if value is None:
        return ""
    arr = np.asarray(value)
    if arr.size == 1:
        return f" (= {arr.reshape(-1)[0].item()} in that sample)"
    return f" (up to {arr.max().item()} in that sample)" if arr.size and arr.dtype.kind in "iuf" else ""


def _loops_and_their_inputs(model) -> list[tuple[str, list[str]]]:
    """(name, graph inputs upstream of its trip count and condition) for each Loop of the main graph."""
    producers = {o: n for n in model.graph.node for o in n.output if o}
    inputs = {i.name for i in model.graph.input}
    found = []
    for node in model.graph.node:
        if node.op_type != "Loop":
            continue
        seen, stack, reached = set(), [t for t in node.input[:2] if t], []
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in inputs and t not in reached:
                reached.append(t)
            if t in producers:
                stack.extend(x for x in producers[t].input if x)
        found.append((node.name or "(unnamed)", sorted(reached)))
    return found


def _load_refusal(e: Exception, inferred) -> Exception:
    said = first_line(e)[:500].rstrip(".")
    missing = _MISSING_KERNEL.search(said)
    if missing is not None:
        # ORT's session state (kernel lookup in the CPU EP's registry) found no kernel for the node's
        # op, opset and input types: a float64 Conv, a bfloat16 MatMul. Nothing is malformed.
        op, since, node = missing.groups()
        types = _input_types(inferred, node) if inferred is not None else []
        at = f" with inputs of type {', '.join(types)}" if types else ""
        return UnsupportedModel(
            f"ONNX Runtime's CPU build has no kernel for {op} (opset {since}) node '{node}'{at}: {said}. Every path "
            "and level would fail.",
            hint="export the model in float32 (quantizers read float32; a float16 upload is quantized from a "
                 "float32 copy), or cast that node's inputs to a type ORT's CPU kernels take, and upload again")
    return InvalidModel(
        f"ONNX Runtime cannot load this model: {said}. Every path and level would fail.",
        hint="Fix what ORT names (onnx.shape_inference.infer_shapes(model, strict_mode=True) often shows it too) "
             "and upload again.")


_MISSING_KERNEL = re.compile(r"Could not find an implementation for (\S+)\((\d+)\) node with name '([^']*)'")


def _input_types(inferred, node_name: str) -> list[str]:
    """The element types of ``node_name``'s inputs in ``inferred`` (main graph), as numpy names."""
    graph = graph_from_model(inferred)  # its dtypes: inputs, value_info and initializers
    node = next((n for n in graph.nodes if n.name == node_name), None)
    return [graph.dtypes[i] for i in node.input if i in graph.dtypes] if node is not None else []
