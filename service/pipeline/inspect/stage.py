"""The inspect stage: what each file holds (its tensors, scales, kernels written in, ops left float),
each quantized file parsed once; its graph index goes on to the levels stage."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from service.pipeline.context import StageContext
from service.pipeline.files import OnnxFile
from service.pipeline.fp32.stage import Fp32
from service.pipeline.inputs.stage import Prepared
from service.pipeline.inspect.dropped_activations import DroppedActivation, dropped_activations
from service.pipeline.inspect.inventory import file_info_from_onnx, inventory_from_onnx
from service.pipeline.isolation import run_path
from service.pipeline.quantize.stage import Quantized
from service.pipeline.vocabulary import ACTIVATIONS_ABSORBED_BY_Q, GraphIndex
from service.schemas.options import ComparisonOptions
from service.schemas.report import Artifact, FileInfo, QuantizationInventory, ToolInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inspected:
    artifacts: dict[str, Artifact]
    inventories: dict[str, QuantizationInventory]
    paths: dict[str, Path]  # artifacts that go on to the levels stage, fp32 first
    loaded: dict[str, GraphIndex]  # their graph index, built once while inspecting (the levels stage takes it)
    fixed_dims: list[str] = field(default_factory=list)  # files whose inputs lost the upload's symbolic dims
    # What the QOperator file lost against the file ORT's quantizer read (a Relu/Clip), read here while its
    # graph is parsed (the levels stage drops each graph once it has run it); the decide stage's lint says so.
    dropped_activations: list[DroppedActivation] = field(default_factory=list)


def inspect_stage(options: ComparisonOptions, prepared: Prepared, fp32: Fp32, quantized: Quantized,
                  ctx: StageContext, *, fp32_seconds: float | None = None) -> Inspected:
    """What each file holds. Each quantized file is loaded once here; its index goes on to the levels."""
    source = prepared.source
    artifacts: dict[str, Artifact] = {}
    inventories: dict[str, QuantizationInventory] = {}
    paths: dict[str, Path] = {"fp32": fp32.file.path}
    loaded: dict[str, GraphIndex] = {}
    artifacts["fp32"] = Artifact(
        name="fp32", status="ok", file=file_info_from_onnx(fp32.file.path, fp32.file.model),
        tool=ToolInfo(name="uploaded ONNX" if source.onnx_path else "torch.onnx.export(dynamo=True)",
                      version="", settings={}),
        quantization=inventory_from_onnx(fp32.file.model) if source.onnx_path else None,
        seconds=fp32_seconds,
    )
    for name, (outcome, secs) in quantized.outcomes.items():
        if not outcome.ok:
            # An ONNX upload's PT2E skip still reports its conversion (parity figure included).
            conversion = getattr(outcome.value, "to_dict", None)
            tool = ToolInfo(name=outcome.value.converter, version="", conversion=conversion()) if conversion else None
            artifacts[name] = Artifact(name=name, status="skipped" if outcome.skipped else "failed",
                                       error=outcome.error, seconds=secs, tool=tool)
            continue
        inspected = run_path(name, "inspect", _inspect, ctx.folders.artifacts / f"{name}.onnx", fp32.histogram)
        if not inspected.ok:
            artifacts[name] = Artifact(name=name, status="failed", error=inspected.error, tool=outcome.value,
                                       seconds=secs)
            continue
        file, file_info, inventory = inspected.value
        inventories[name] = inventory
        paths[name] = file.path
        loaded[name] = file.index
        artifacts[name] = Artifact(name=name, status="ok", tool=outcome.value, file=file_info,
                                   quantization=inventory, seconds=secs)
    return Inspected(artifacts=artifacts, inventories=inventories, paths=paths, loaded=loaded,
                     fixed_dims=_files_with_fixed_dims(source.specs, loaded),
                     dropped_activations=_dropped_activations(quantized, fp32, loaded.get("ort_qoperator")))


def _dropped_activations(quantized: Quantized, fp32: Fp32, qoperator: GraphIndex | None) -> list[DroppedActivation]:
    """The QOperator file against the file quantize_static read (pre-processed: its nodes are the ones ORT's
    quantizer saw), parsed only when the model has an activation to drop. A lint is extra evidence: a
    failure here is logged, never the job's."""
    if qoperator is None or not any(op in fp32.histogram for op in ACTIVATIONS_ABSORBED_BY_Q):
        return []
    try:
        read = fp32.file.model if quantized.ort_input in (None, fp32.file.path) else \
            onnx.load(str(quantized.ort_input), load_external_data=False)
        return dropped_activations(read, qoperator.model)
    except Exception:  # noqa: BLE001
        log.warning("the dropped-activation check failed; the report has no such lint", exc_info=True)
        return []


def _inspect(path: Path, fp32_hist: dict[str, int]) -> tuple[OnnxFile, FileInfo, QuantizationInventory]:
    file = OnnxFile.load(path)
    return (file, file_info_from_onnx(path, file.model),
            inventory_from_onnx(file.model, fp32_histogram=fp32_hist, index=file.index))


def _files_with_fixed_dims(specs, loaded: dict[str, GraphIndex]) -> list[str]:
    """The quantized files whose inputs lost the upload's symbolic dims (the PT2E file of an ONNX
    upload: torch.export of the converted module runs at the job's shapes)."""
    symbolic = {(s.name, i) for s in specs for i, d in enumerate(s.shape) if not isinstance(d, int)}
    out = []
    for name, g in loaded.items():
        dims = {(vi.name, i): d for vi in g.model.graph.input for i, d in enumerate(vi.type.tensor_type.shape.dim)}
        if name != "fp32" and any(key in dims and dims[key].HasField("dim_value") for key in symbolic):
            out.append(name)
    return out
