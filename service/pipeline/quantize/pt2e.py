"""PT2E path: torch.export -> prepare_pt2e(XNNPACKQuantizer) -> calibrate -> convert_pt2e -> QDQ ONNX."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from importlib.metadata import version
from pathlib import Path

from service.errors import NonFiniteCalibration, Pt2eFileRejected
from service.pipeline.inputs.samples import Feed
from service.pipeline.inputs.sources import ModelSource, dynamic_shapes_for, example_args
from service.pipeline.isolation import NONFINITE_HINT, first_line, matched_hint
from service.pipeline.quantize.pt2e_from_onnx.names import annotate_onnx, restore_io_names
from service.pipeline.quantize.pt2e_from_onnx.own_weights import shared_again
from service.pipeline.quantize.pt2e_from_onnx.program import (PT2_HINT, ConversionSkipped, GraphTooLarge, graph_size_refusal,
                                                           program_from_onnx, static_args)
from service.pipeline.quantize.selection_tail import prefix_file, selection_split, splice_tail
from service.pipeline.quantize.side_by_side import reclaim_idle_core
from service.pipeline.quantize.toolchain_patches.pt2e import (
    install_conv_bn_fold_guard,
    install_histogram_search,
    install_iterative_union_find,
    install_multi_output_match_shortcut,
)
from service.pipeline.ort.sessions import ort_refusal
from service.pipeline.time_limit import step
from service.pipeline.vocabulary import all_nodes
from service.schemas.report import ToolInfo


def program_for_pt2e(source: ModelSource, shapes: dict[str, tuple[int, ...]], calibration=None, evaluation=None, *,
                     max_graph_ops: int | None = None):
    """(torch.export program PT2E starts from, conversion info or None).

    ONNX uploads go through the project's own converter (onnx_torch/, through quantize/pt2e_from_onnx/), which specializes
    the graph to the resolved shapes and checks parity with ORT before anything is quantized.
    onnx2torch is no longer used: on the real-world corpus it converted fewer models (no GRU/LSTM,
    no opset-18 input forms, untraceable shape arithmetic), see docs/uploads.md.
    """
    if source.program is not None:
        return source.program, None
    return program_from_onnx(source, shapes, calibration=calibration, evaluation=evaluation,
                             max_graph_ops=max_graph_ops)


@dataclass(frozen=True)
class Pt2eInput:
    """What one run of the PT2E path reads: the model, its resolved shapes, the samples, and how it
    quantizes. A re-run (exclude-and-retry, a prefix before a selection) is the same input with one
    field changed (``dataclasses.replace``)."""

    source: ModelSource
    shapes: dict[str, tuple[int, ...]]
    calibration: list[Feed]
    evaluation: list[Feed] | None = None  # the converter's parity check against ORT (ONNX uploads)
    per_channel: bool = True
    skip_modules: tuple[str, ...] = ()  # exclude-and-retry on a torch program: modules left in float
    skip_onnx_nodes: tuple[str, ...] = ()  # the same on an ONNX upload: its nodes
    max_graph_ops: int | None = None  # options.pt2e.max_graph_ops (refuse_oversized_program)


def qdq_from_pt2e(run: Pt2eInput, out_path: Path) -> ToolInfo:
    source, shapes = run.source, run.shapes
    try:
        with step("the conversion to torch and torch.export"):
            program, conversion = program_for_pt2e(source, shapes, run.calibration, run.evaluation,
                                                   max_graph_ops=run.max_graph_ops)
    except GraphTooLarge:
        raise  # the whole graph is too large: a prefix before a selection would be as large
    except ConversionSkipped:
        # Only once the whole graph failed to convert: a selection the converter folds (NonZero of a
        # constant) is no reason to leave the rest of the graph in float.
        split = selection_split(source.onnx_model, shapes) if source.program is None and source.onnx_path else None
        if split is None:
            raise
        return _prefix_then_tail(split, run, out_path)
    if run.max_graph_ops is not None:
        refuse_oversized_program(program, conversion, run.max_graph_ops,
                                 model=source.onnx_model if source.program is None else None)
    try:
        return _quantized_program(program, conversion, run, out_path)
    except (Pt2eFileRejected, NonFiniteCalibration):
        raise  # a failure of the path (the file exists; the samples make NaN), not a module PT2E refused
    except Exception as e:  # noqa: BLE001
        if conversion is None:
            raise
        # A module that carries a NonZero's count whole (onnx_torch/data_sizes.py) that PT2E or the re-export
        # then refuses still has the cut before its selections, as when the converter refused the NonZero.
        split = selection_split(source.onnx_model, shapes) if source.onnx_path else None
        if split is not None:
            return _prefix_then_tail(split, run, out_path)
        # The module converted and matched ORT; PT2E or the ONNX re-export refused it.
        raise ConversionSkipped(f"PT2E failed on the converted module: {first_line(e)}", stage="quantize",
                                hint=matched_hint("pt2e_qdq", e) or PT2_HINT, conversion=conversion) from e


def _prefix_then_tail(split, run: Pt2eInput, out_path: Path) -> ToolInfo:
    """PT2E on the graph before its selections, then the upload's tail appended in float
    (quantize/selection_tail.py)."""
    source = run.source
    with prefix_file(split, source.onnx_path) as prefix_path:
        read = {vi.name for vi in split.prefix.graph.input}
        prefix = replace(source, specs=[s for s in source.specs if s.name in read], onnx_path=prefix_path,
                         onnx_model=split.prefix)
        tool = qdq_from_pt2e(replace(run, source=prefix), out_path)
        with step("appending the float tail"):
            splice_tail(out_path, split, prefix_path=prefix_path, feed=run.calibration[0])
    _ort_loads(out_path)
    note = split.note()
    if tool.conversion is not None:
        tool.conversion.setdefault("notes", []).append(note)
    return tool.model_copy(update={"notes": [*tool.notes, note]})


def _first_nonfinite_observed(prepared, args) -> str:
    """The node whose output the first observer to see NaN or inf watches, run again on ``args``
    (the failing sample; the observers' state is thrown away with the failed path): an upload's
    node for a module converted from ONNX (``meta["custom"]``, names.py), else torch's node name."""
    import torch

    watched = {n.target: n.args[0] for n in prepared.graph.nodes
               if n.op == "call_module" and n.args and isinstance(n.args[0], torch.fx.Node)}
    seen: list[str] = []

    def check(name):
        def hook(_module, inputs):
            x = inputs[0] if inputs else None
            if not seen and isinstance(x, torch.Tensor) and x.is_floating_point() and not torch.isfinite(x).all():
                seen.append(name)
        return hook

    handles = [m.register_forward_pre_hook(check(name)) for name, m in prepared.named_children() if name in watched]
    try:
        with torch.no_grad():
            prepared(*args)
    except Exception:  # noqa: BLE001 - it fails again, after the hook has seen the tensor
        pass
    finally:
        for h in handles:
            h.remove()
    if not seen:
        return "an activation"
    node = watched[seen[0]]
    custom = node.meta.get("custom") or {}
    if "onnx_node" in custom:
        return f"{custom.get('onnx_op', '')} {custom['onnx_node']!r}".strip()
    return f"torch node {node.name!r}"


def refuse_oversized_program(program, conversion, max_graph_ops: int, *, model=None) -> None:
    """A PathSkipped before PT2E starts when the torch graph has more than ``max_graph_ops`` ops.

    Why a count of ops: prepare_pt2e, convert_pt2e and torch.onnx.export (its decompositions and
    onnxscript's rewriter) each walk the whole graph, and on this stack their time grows with its
    size, not its weights: 2676 ops (six peephole LSTMs unrolled over 16 steps) took 108 s after
    torch.export, 40 ms per op (docs/history/notes.md, ninth pass); a 100-step twin would run past the job's
    time limit and take the ORT paths' results with it. Converted from ONNX, the ops are attributed
    to the upload's nodes (``meta["custom"]["onnx_node"]``, names.py), so the message names them."""
    ops = [n for n in program.graph.nodes if n.op == "call_function"]
    if len(ops) <= max_graph_ops:
        return
    per_node: Counter = Counter()
    for n in ops:
        custom = n.meta.get("custom") or {}
        if "onnx_node" in custom:  # a Loop/If/Scan body's ops count for the main-graph node around them
            per_node[(str(custom.get("onnx_top_op", custom.get("onnx_op", ""))),
                      str(custom.get("onnx_top", custom["onnx_node"])))] += 1
    raise graph_size_refusal(f"the torch graph has {len(ops)} ops", per_node, max_graph_ops, model=model,
                             conversion=conversion)


def _quantized_program(program, conversion, run: Pt2eInput, out_path: Path) -> ToolInfo:
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    source, shapes, calibration, per_channel = run.source, run.shapes, run.calibration, run.per_channel
    specs = source.specs
    config = get_symmetric_quantization_config(is_per_channel=per_channel)
    quantizer = XNNPACKQuantizer().set_global(config)
    # Exclude-and-retry (runtime/layers_retry): these modules stay float. torchao 0.18's
    # set_module_name asserts on None, but its annotation pass takes None as "annotate nothing"
    # (_annotate_all_static_patterns returns early) and the global config skips every module
    # listed in module_name_config, so the entry is written directly.
    for module_name in run.skip_modules:
        quantizer.module_name_config[module_name] = None
    if run.skip_onnx_nodes:
        _annotating_all_but(quantizer, set(run.skip_onnx_nodes))
    install_iterative_union_find()  # a chain of ~1000 ops sharing a spec no longer recurses past Python's limit
    with step("torchao's prepare_pt2e"):
        prepared = prepare_pt2e(program.module(), quantizer)
    notes = _shared_weight_notes(prepared)
    if conversion is not None:  # what parity could not check is the reader's to know, on the page too
        notes += conversion.caveats
    names = [s.name for s in specs]
    with torch.no_grad(), step(f"PT2E calibration ({len(calibration)} samples)"):
        for i, feed in enumerate(calibration):
            reclaim_idle_core()  # the ORT paths beside this one are done: both cores for torch again
            args = [torch.from_numpy(feed[n]) for n in names]
            try:
                prepared(*args)
            except RuntimeError as e:  # HistogramObserver's torch.histc: "range of [nan, nan] is not finite"
                if "is not finite" not in str(e):
                    raise
                raise NonFiniteCalibration(
                    f"PT2E's calibration failed on sample {i + 1}: {first_line(e)}. Cause: the observer after "
                    f"{_first_nonfinite_observed(prepared, args)} saw NaN or inf: the fp32 model computes it there on "
                    "the calibration samples, and no scale fits such a range.", hint=NONFINITE_HINT) from e
            if i == 0:
                _observe_weights_once(prepared)
    install_conv_bn_fold_guard()  # a standalone BN no longer costs 96 pattern exports
    install_histogram_search()  # the observers' min/max search, same steps, without a tensor op per step
    install_multi_output_match_shortcut()  # onnxscript's optimizer: no whole-graph index per non-Slice node
    with step("torchao's convert_pt2e"):
        converted = convert_pt2e(prepared)
    # torch.onnx.export re-exports the converted module, so the dynamic batch is stated again.
    # A module converted from ONNX was exported with static shapes (every dim resolved).
    if conversion is None:
        export_args, dynamic = example_args(specs, shapes), dynamic_shapes_for(specs)
    else:
        export_args, dynamic = static_args(specs, shapes, calibration), None
    reclaim_idle_core()
    with torch.no_grad(), step("torch.onnx.export"):
        onnx_program = torch.onnx.export(
            converted, export_args, dynamo=True, verbose=False, dynamic_shapes=dynamic,
        )
    with step("writing the PT2E file"):
        _write_pt2e_file(onnx_program, conversion, source, specs, out_path)
    act = config.input_activation
    weight = config.weight

    return ToolInfo(
        name="torchao PT2E (XNNPACKQuantizer) + torch.onnx.export(dynamo=True)",
        version=f"torch {version('torch')}, torchao {version('torchao')}",
        settings={
            "quantizer": "torchao.testing.pt2e._xnnpack_quantizer.XNNPACKQuantizer",
            "config": "get_symmetric_quantization_config",
            "per_channel": per_channel,
            "activation": f"{act.dtype} [{act.quant_min}, {act.quant_max}] {act.qscheme}",
            "weight": f"{weight.dtype} [{weight.quant_min}, {weight.quant_max}] {weight.qscheme}",
            "calibration_samples": len(calibration),
        },
        calibration=f"{_observer_name(act)} (activations), {_observer_name(weight)} (weights)",
        notes=notes,
        conversion=conversion.to_dict() if conversion is not None else None,
    )


def _write_pt2e_file(onnx_program, conversion, source, specs, out_path: Path) -> None:
    """The exported program as the PT2E file: the upload's names, one copy per repeated weight, no
    converter traces (an ONNX upload), then checked to load in ORT."""
    import onnx

    proto = onnx_program.model_proto  # a property that serializes anew on every access
    if conversion is not None:
        restore_io_names(proto, [s.name for s in specs],
                         [o.name for o in source.onnx_model.graph.output] if source.onnx_model is not None else None)

        named = annotate_onnx(proto, onnx_program.exported_program.graph_module)
        conversion.notes.append(f"{named} nodes of the PT2E file name the upload node and tensors they compute "
                                "(metadata_props quantcompare.onnx_node/onnx_op/onnx_outputs)")
        copies, saved = shared_again(proto, out_path.parent)
        if copies:
            conversion.notes.append(f"{copies} initializers of the exported file repeated another's bytes ({saved / 2**20:.1f} "
                                    "MiB: the int8 copies of weights the upload shares); every reader now reads the "
                                    "first, so the file stores each once, as the upload does (equal bytes, equal outputs)")
        if _drop_converter_traces(proto):
            conversion.notes.append("torch's per-node stack traces, FX nodes, class hierarchies and namespaces "
                                    f"({', '.join(sorted(_CONVERTER_TRACE_KEYS))}) are removed: for an ONNX upload "
                                    "they name the converter's Python frames and classes, not the upload (the "
                                    "quantcompare.onnx_* keys name the upload's nodes; name_scopes stay)")
    onnx.save(proto, out_path)
    _ort_loads(out_path)


# What torch.onnx writes per node about the FX graph it exported: for a module converted from ONNX,
# the converter's frames (file paths of the server included) and classes, read by nothing after
# names.annotate_onnx (fx_node) has mapped them. They were 67% of a 393 KiB PT2E file (madmom's TCN).
_CONVERTER_TRACE_KEYS = {"pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node", "pkg.torch.onnx.class_hierarchy",
                         "namespace"}


def _annotating_all_but(quantizer, onnx_nodes: set[str]) -> None:
    """Exclude-and-retry on an ONNX upload: the converter calls functions, not modules, so no module
    name selects a node; the FX nodes it made from ``onnx_nodes`` (``meta["custom"]["onnx_node"]``,
    onnx_torch/module.py) lose the annotation XNNPACK gave them, and run in float between what the
    neighbours quantize."""
    annotate = quantizer.annotate

    def annotate_all_but(model):
        model = annotate(model)
        for n in model.graph.nodes:
            if n.meta.get("custom", {}).get("onnx_node") in onnx_nodes:
                n.meta.pop("quantization_annotation", None)
        return model

    quantizer.annotate = annotate_all_but


def _drop_converter_traces(proto) -> int:
    """Remove ``_CONVERTER_TRACE_KEYS`` from every node; returns how many had one."""
    dropped = 0
    for node in all_nodes(proto.graph):
        keep = [p for p in node.metadata_props if p.key not in _CONVERTER_TRACE_KEYS]
        if len(keep) != len(node.metadata_props):
            dropped += 1
            del node.metadata_props[:]
            node.metadata_props.extend(keep)
    return dropped


def _ort_loads(path: Path) -> None:
    """The path is ok only when ORT loads its file: torch.onnx.export can write one ORT's type check
    refuses (it quantized a float16 graph's tensors with float32 scales, before float16 uploads were
    converted as their float32 copy), and the path then fails with ORT's words, not "ok" with every
    level failing."""
    e = ort_refusal(path)
    if e is None:
        return
    raise Pt2eFileRejected(f"ORT cannot load the file torch.onnx.export wrote: {first_line(e)[:500]}",
                           hint="ORT's message names the node it refuses; the ORT paths are unaffected") from e


_MINMAX_OBSERVERS = ("MinMaxObserver", "PerChannelMinMaxObserver")
_WEIGHTED_OPS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear")


def _shared_weight_notes(prepared) -> list[str]:
    """Convs/linears that torchao left in float because another one reads the same weight (a module
    called twice: a siamese branch, a cell applied at every step). The XNNPACK quantizer annotates a
    conv or linear together with its weight and bias nodes and skips it when one of them is already
    annotated (``_xnnpack_quantizer_utils``: ``if _is_annotated(partition): continue``). ONNX uploads
    give each Conv its own copy first (``quantize/pt2e_from_onnx/own_weights.py``); a .pt2 is the user's program."""
    skipped = []
    for node in prepared.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "__name__", "").split(".")[0] not in _WEIGHTED_OPS:
            continue
        ann = node.meta.get("quantization_annotation")
        weight = node.args[1] if len(node.args) > 1 else None
        if (ann is None or not ann._annotated) and getattr(weight, "op", None) == "get_attr" and len(weight.users) > 1:
            skipped.append(node.name)
    if not skipped:
        return []
    return [f"{len(skipped)} conv/linear nodes read a weight another one reads too ({', '.join(skipped[:4])}"
            f"{', ...' if len(skipped) > 4 else ''}): torchao's XNNPACK quantizer annotates a weight with the first "
            "op that reads it and skips the others, so they stay float in this file; give each use its own "
            "module (copy.deepcopy) to quantize them"]


def _observe_weights_once(prepared) -> int:
    """After the first calibration pass, stop re-observing constant weights.

    A weight is a ``get_attr`` constant, so its min/max observer sees the same tensor on every
    pass and ends with the same min/max after one: skipping the repeats changes nothing the
    observer computes (only min/max observers: a histogram's counts would change). On
    resnet18 this is ~4 s of a 31 s calibration. Returns how many observers were frozen.
    """
    frozen = 0
    for node in prepared.graph.nodes:
        if node.op != "call_module" or not node.args or getattr(node.args[0], "op", None) != "get_attr":
            continue
        observer = prepared.get_submodule(node.target)
        if type(observer).__name__ in _MINMAX_OBSERVERS:
            observer.forward = _identity  # instance attribute: the module's state (min/max) is kept
            frozen += 1
    return frozen


def _identity(x):
    return x


def _observer_name(spec) -> str:
    # torchao wraps the observer class in PartialWrapper(functools.partial(cls, ...)).
    ctr = spec.observer_or_fake_quant_ctr
    func = getattr(getattr(ctr, "p", ctr), "func", ctr)
    return getattr(func, "__name__", repr(func))
