"""The fp32 reference checked where ORT would refuse it, before any path runs.

An upload ORT refuses to load, or one it cannot run at the job's input shapes, would fail every
path and level with ORT's words four times over after minutes of quantizing, and a job without gates
would still read "passed"; the job stops once, in its fp32 stage, naming what ORT names.
"""

from __future__ import annotations

import re
from pathlib import Path

from service.errors import InvalidCalibration, InvalidModel, InvalidOptions, UnsupportedModel
from service.pipeline.inputs.samples import Samples
from service.pipeline.inputs.specs import InputSpec
from service.pipeline.options import ComparisonOptions
from service.pipeline.quantize.isolation import first_line
from service.pipeline.runtime.ort_sessions import session_for
from service.pipeline.vocabulary import graph_from_model


def refuse_if_fp32_cannot_run(path: Path, inferred, samples: Samples, shapes: dict[str, tuple[int, ...]],
                              specs: list[InputSpec], options: ComparisonOptions) -> None:
    """One session at disable_all (a type error onnx's checker, without its full check, lets through;
    a kernel ORT's CPU build lacks) and one fp32 inference on the first calibration sample (a fixed
    Reshape after a dim the user set). ``inferred``: the graph after shape inference at the job's
    shapes, for the types a missing kernel was asked for."""
    try:
        session = session_for(path, "disable_all")
    except Exception as e:  # noqa: BLE001 - ORT's refusal is the finding
        raise _load_refusal(e, inferred) from e
    feed = samples.calibration[0] if samples.calibration else None
    if feed is None:
        return
    try:
        session.run(None, feed)
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
