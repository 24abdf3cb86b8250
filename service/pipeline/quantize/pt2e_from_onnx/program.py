"""ONNX upload -> torch.export program for PT2E, with a parity check before quantization.

    specialize (specialize.py)  ->  build the module by one eager run (module.py)
    ->  parity vs ORT on the fp32 ONNX (parity.py)  ->  torch.export (static shapes)

Every refusal is a PathSkipped naming what blocks it: all missing ops at once with counts, the
node whose converter failed, the first diverging tensor, or the node torch.export stopped at.
"""
from __future__ import annotations

import logging
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.errors import PathSkipped
from service.pipeline.quantize.already_quantized import skip_if_quantized
from service.pipeline.isolation import first_line
from service.pipeline.quantize.onnx_cleanup import constant_inputs, shown_value
from service.pipeline.vocabulary import RECURRENT_OPS, graph_from_model, is_onnx_domain

from service.pipeline.quantize.pt2e_from_onnx.parity import parity_vs_onnx
from service.pipeline.quantize.pt2e_from_onnx.specialize import specialized

log = logging.getLogger(__name__)

CONVERTER = "quantcompare onnx_torch (onnx_torch/)"
# Parity runs the module and ORT on the first evaluation samples. Two, not all: a wrong
# conversion (an op, an attribute, a layout) shows on any sample of the resolved shapes, and the
# evaluate stage still compares every sample's PT2E output with fp32; on a real-size model each
# extra sample costs a torch and an ORT inference (8 samples were 16 s of a PP-OCRv4 detector job
# at 960x960).
PARITY_FEEDS = 2
PT2_HINT = "upload the PyTorch model as a torch.export .pt2 to run the PT2E path; the ORT paths are unaffected"


@dataclass
class Conversion:
    """What ``artifacts.pt2e_qdq.tool.conversion`` reports."""

    converter: str = CONVERTER
    ops: dict[str, int] = field(default_factory=dict)  # op_type -> nodes kept as torch ops
    folded: dict[str, int] = field(default_factory=dict)  # op_type -> nodes folded to constants
    max_abs_error_vs_onnx: float | None = None
    parity: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # What parity could not check (outputs after a tie): the PT2E tool's notes repeat it, so the page shows it.
    caveats: list[str] = field(default_factory=list)
    # Inputs folded in as constants (specialize._bake_inputs): the PT2E file still takes them, and ignores them.
    folded_inputs: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"converter": self.converter, "ops": self.ops, "folded": self.folded,
                "max_abs_error_vs_onnx": self.max_abs_error_vs_onnx, "parity": self.parity,
                "seconds": self.seconds, "notes": [*self.caveats, *self.notes], "folded_inputs": self.folded_inputs}


class ConversionSkipped(PathSkipped):
    """PathSkipped that carries what the conversion learnt so far (parity figure included)."""

    def __init__(self, message: str, *, stage: str, hint: str | None, conversion: Conversion):
        super().__init__(message, stage=stage, hint=hint)
        self.conversion = conversion


class GraphTooLarge(ConversionSkipped):
    """The converted graph is past ``options.pt2e.max_graph_ops`` (``graph_size_refusal``): no part of
    it is tried on its own (``pt2e.qdq_from_pt2e``'s split before a selection would be as large)."""


# The PT2E path's graph-size refusal (options.pt2e.max_graph_ops): here, right after the build run, when
# the module already calls far more ops than the cap (torch.export of an unrolled 501-step decoder took
# 92 of SLANet's 105 s before the exact count refused it), and in pt2e.refuse_oversized_program on the
# exported program, the exact count. One message and hint for both.
# The build run's count of kept ONNX nodes (a loop body once per step) is not the torch graph's: a
# converter may emit several ops for a node, or none (Identity). Only a count this many times the cap
# refuses before torch.export; below it the exact count on the exported program decides.
EARLY_FACTOR = 2


def fixed_trip_loops(model, names: list[str]) -> list[tuple[str, int]]:
    """(name, trips) of the main-graph Loops among ``names`` whose trip count is a constant of the
    model (an initializer or a Constant node): no input shape shortens them (SLANet's 501 steps)."""
    if model is None:
        return []
    g = graph_from_model(model)
    out = []
    for n in g.nodes:
        if n.op_type == "Loop" and n.name in names and n.input and g.is_constant(n.input[0]):
            try:
                out.append((n.name, int(g.init_array(n.input[0]).reshape(-1)[0])))
            except Exception:  # noqa: BLE001 - an unreadable count is no fixed one
                continue
    return out


def graph_size_refusal(what: str, per_node: Counter, max_graph_ops: int, *, model=None,
                       conversion=None) -> PathSkipped:
    """The refusal: ``what`` says what was counted; ``per_node``: (op type, name) of the upload's
    main-graph node -> the ops counted for it (a Loop's body counts for the Loop). A ConversionSkipped
    (``GraphTooLarge``) carrying ``conversion`` for an ONNX upload, else a PathSkipped."""
    biggest = ", ".join(f"{op} {name!r} ({k} ops)" for (op, name), k in per_node.most_common(3))
    where = f"; the most from {biggest}" if biggest else ""
    message = (f"{what}, more than options.pt2e.max_graph_ops ({max_graph_ops}): "
               f"PT2E and torch.onnx.export take time in proportion to it{where}")
    recurrent = any(op in RECURRENT_OPS | {"Loop", "Scan"} for op, _ in per_node)
    hint = ("recurrences and loops are unrolled step by step: fix a shorter sequence with options.input_shapes, "
            "or upload a .pt2 that keeps nn.LSTM/nn.GRU whole; " if recurrent else "")
    fixed = fixed_trip_loops(model, [name for (op, name), _ in per_node.most_common(3) if op == "Loop"])
    if fixed:  # its trip count is the model's own constant: no input shape shortens it
        shown = ", ".join(f"{name!r} runs up to {trips} steps" for name, trips in fixed)
        hint = (f"Loop {shown} whatever the input's shape (its trip count is a constant of the model, such as a "
                "decoder's maximum length): export the model with a smaller maximum to compare it here; ")
    hint += ("raise options.pt2e.max_graph_ops to run it anyway (and QUANTCOMPARE_JOB_TIMEOUT_S with it), "
             "or compare the ORT paths only (options.artifacts); the ORT paths are unaffected")
    if conversion is not None:
        return GraphTooLarge(message, stage="convert", hint=hint, conversion=conversion)
    return PathSkipped(message, stage="quantize", hint=hint)


def static_args(specs, shapes, calibration) -> tuple:
    """Export arguments of exactly the resolved shapes; real calibration values where there are some
    (token ids stay in their embedding's range)."""
    import torch
    from onnx_torch.module import contiguous

    args = []
    for s in specs:
        if calibration:
            args.append(torch.from_numpy(contiguous(calibration[0][s.name])))
            continue
        dtype = getattr(torch, s.dtype)
        shape = list(shapes[s.name])
        args.append(torch.randn(shape, dtype=dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype))
    return tuple(args)


def program_from_onnx(source, shapes: dict[str, tuple[int, ...]], *,
                      calibration: list[dict[str, np.ndarray]] | None = None,
                      evaluation: list[dict[str, np.ndarray]] | None = None, max_graph_ops: int | None = None):
    """(torch.export program, Conversion) for an ONNX upload; ConversionSkipped names what blocks it.

    ``max_graph_ops``: a module whose build run already kept ``EARLY_FACTOR`` times more ops
    is refused there, before the parity check and torch.export, which take the time on such a graph."""
    import onnx
    import torch
    from torch.export import export

    from onnx_torch.module import ConversionError, MissingConverters, build_module
    from onnx_torch.registry import UnsupportedNode

    conv = Conversion()
    t0 = time.perf_counter()
    model = onnx.load(str(source.onnx_path), load_external_data=True)
    skip_if_quantized(model)
    spec = specialized(model, shapes, constants=constant_inputs(calibration or []))
    conv.notes.extend(spec.notes)
    conv.folded_inputs = {n: shown_value(v) for n, v in spec.baked.items()}
    conv.seconds["specialize"] = round(time.perf_counter() - t0, 3)

    names = [s.name for s in source.specs]
    args = static_args(source.specs, shapes, calibration)
    example = {n: a.numpy() for n, a in zip(names, args)}
    t0 = time.perf_counter()
    try:
        built = build_module(spec.model, names, example, baked=spec.baked)
    except MissingConverters as e:
        opsets = {("ai.onnx" if is_onnx_domain(o.domain) else o.domain): o.version for o in spec.model.opset_import}
        opset = opsets.get("ai.onnx")
        # the registry keys other domains at version 1; the file's own import is the version to show
        listed = ", ".join(f"{d}.{op} (opset {opsets.get(d, v)}) x{n}" if d != "ai.onnx" else f"{op} (opset {v}) x{n}"
                           for (d, op, v), n in e.missing.most_common())
        classic_ml = any(d == "ai.onnx.ml" for d, _, _ in e.missing)
        hint = ("ai.onnx.ml operators (scikit-learn, XGBoost, LightGBM exports: trees, linear models, scalers, "
                "ZipMap) have no torch form, so PT2E does not apply to this model; the ORT paths are unaffected"
                if classic_ml else PT2_HINT)
        raise ConversionSkipped(f"no ONNX -> torch converter for {listed} (ai.onnx opset {opset})", stage="convert",
                                hint=hint, conversion=conv) from e
    except ConversionError as e:
        raise ConversionSkipped(f"ONNX -> torch conversion failed at {e}", stage="convert", hint=PT2_HINT,
                                conversion=conv) from e
    except UnsupportedNode as e:  # outside any node: a graph output or body value torch has no tensor for
        raise ConversionSkipped(f"ONNX -> torch conversion failed: {e} (a string tensor, say: torch has no tensor of "
                                "that type)", stage="convert", hint=PT2_HINT, conversion=conv) from e
    conv.seconds["build"] = round(time.perf_counter() - t0, 3)
    conv.ops = dict(built.converted.most_common())
    conv.folded = dict(built.folded.most_common())
    kept = sum(built.converted.values())
    if max_graph_ops is not None and kept > EARLY_FACTOR * max_graph_ops:
        raise graph_size_refusal(
            f"the converted module calls {kept} ops before torch.export (each unrolled loop step counted; more "
            f"than {EARLY_FACTOR}x the cap, so its torch graph is past it too)", built.converted_under,
            max_graph_ops, model=source.onnx_model, conversion=conv)
    module = built.module.eval()

    t0 = time.perf_counter()
    feeds = (list(evaluation or []) or list(calibration or []) or [example])[:PARITY_FEEDS]
    parity = parity_vs_onnx(module, source.onnx_path, names, feeds, specialized_model=spec.model)
    conv.seconds["parity"] = round(time.perf_counter() - t0, 3)
    conv.max_abs_error_vs_onnx = parity.max_abs_error
    conv.parity = parity.to_dict()
    if parity.after_ties:
        conv.caveats.append("parity left out " + "; ".join(f"output {o!r}, which follows {why}" for o, why in
                                                          parity.after_ties.items()) + ": no value after a tie tells "
                          "a conversion fault from the other order")
    if not parity.ok:
        raise ConversionSkipped(f"the converted torch module does not match ORT on the fp32 ONNX: {parity.reason}",
                                stage="convert", hint="report the model with this message; " + PT2_HINT,
                                conversion=conv)

    t0 = time.perf_counter()
    try:
        # preserve_node_meta: each FX node keeps the ONNX node it came from (names.py)
        with torch.no_grad(), torch.fx.traceback.preserve_node_meta():
            program = export(module, args, strict=False)
    except Exception as e:  # noqa: BLE001
        where = _node_in_trace(e)
        raise ConversionSkipped(f"torch.export cannot trace the converted module{where}: {first_line(e)}",
                                stage="convert", hint=PT2_HINT, conversion=conv) from e
    conv.seconds["export"] = round(time.perf_counter() - t0, 3)
    return program, conv


def _node_in_trace(e: BaseException) -> str:
    """' at <op> node <name>' when the failure happened inside a converter call."""
    node = None
    for frame, _ in traceback.walk_tb(e.__traceback__):
        local = frame.f_locals
        if frame.f_code.co_name == "run_node" and "node" in local:
            node = local["node"]
    if node is None:
        return ""
    return f" at {node.op_type} node {node.name!r}"
