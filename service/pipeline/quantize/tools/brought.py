"""Quantized files the user brings beside the fp32 model (multipart ``artifact.<name>``): each is compared as
``artifacts.<name>`` on the same evaluation samples, on every section.

A brought file must be the same model: its graph inputs and outputs must have the fp32 model's names, ranks,
dtypes and fixed dims (a dim symbolic in either file matches anything), or the job is refused with
``artifact_mismatch`` naming each difference. What made it is read from what the file says of itself:
``producer_name``/``producer_version``, ``metadata_props`` and the domains of its Q/DQ ops.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from service.errors import ArtifactMismatch, InvalidOptions, QuantCompareError
from service.pipeline.inputs.safety import onnx_model_from_path
from service.schemas.options import BUILTIN_ARTIFACTS
from service.pipeline.vocabulary import QDQ_OPS, all_nodes
from service.schemas.report import ToolInfo

MAX_BROUGHT_FILES = 8
# What a brought file's producer_name says about the tool, where the name is not the tool's own.
_KNOWN_PRODUCERS = {"onnx.quantize": "onnxruntime quantize_static (or NVIDIA ModelOpt, which writes ORT's name)",
                    "pytorch": "torch.onnx.export", "tf2onnx": "tf2onnx (a TensorFlow / TFLite model)",
                    "quark.onnx": "AMD Quark", "olive": "Microsoft Olive"}


def refuse_unknown_artifacts(options, brought) -> None:
    """What the job's artifacts must be before anything runs: some (``artifacts: []`` switches the built-in
    paths off, so there must be brought files), and every gate's artifact a built-in path or a brought file (a
    gate's name is any name a brought file could have, so a misspelt one is caught here, against the job's own;
    a built-in path the job does not run fails its gate for missing data, as before)."""
    known = [*options.artifacts, *brought]
    if not known:
        raise InvalidOptions("options.artifacts is [] and no quantized file was brought: nothing to compare",
                             hint="bring files as multipart parts artifact.<name>=@file.onnx (CLI: --artifact "
                                  "name=path), or leave options.artifacts out for the built-in paths")
    for gate in options.gates:
        if gate.artifact != "*" and gate.artifact not in known and gate.artifact not in BUILTIN_ARTIFACTS:
            raise InvalidOptions(f"gate on {gate.artifact!r}, which this job does not make nor bring (its artifacts: "
                                 f"{', '.join(known)})",
                                 hint="name one of the job's artifacts, add it to options.artifacts, or bring a "
                                      "file under that name (artifact.<name>)")


def _io(values, initializers: set[str]) -> dict[str, tuple[int, list]]:
    out = {}
    for v in values:
        if v.name in initializers:  # an initializer listed as an input (old exporters): not fed
            continue
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] if t.HasField("shape") else None
        out[v.name] = (t.elem_type, dims)
    return out


def mismatches(fp32_model, brought_model) -> list[str]:
    """How ``brought_model``'s graph inputs and outputs differ from ``fp32_model``'s (empty: the same model)."""
    from onnx import TensorProto

    def dtype(e: int) -> str:
        return TensorProto.DataType.Name(e).lower() if e else "untyped"

    inits = {i.name for i in fp32_model.graph.initializer}
    binits = {i.name for i in brought_model.graph.initializer}
    out = []
    for kind, ours, theirs in (("input", _io(fp32_model.graph.input, inits), _io(brought_model.graph.input, binits)),
                               ("output", _io(fp32_model.graph.output, set()), _io(brought_model.graph.output, set()))):
        for name in ours.keys() - theirs.keys():
            out.append(f"{kind} {name!r} of the fp32 model is missing")
        for name in theirs.keys() - ours.keys():
            out.append(f"{kind} {name!r} is not one of the fp32 model's {kind}s ({', '.join(map(repr, ours))})")
        for name in ours.keys() & theirs.keys():
            (e1, d1), (e2, d2) = ours[name], theirs[name]
            if e1 != e2:
                out.append(f"{kind} {name!r} is {dtype(e2)}, the fp32 model's is {dtype(e1)}")
            if d1 is not None and d2 is not None:
                if len(d1) != len(d2):
                    out.append(f"{kind} {name!r} has rank {len(d2)}, the fp32 model's has rank {len(d1)}")
                elif any(a is not None and b is not None and a != b for a, b in zip(d1, d2)):
                    show = lambda d: "[" + ", ".join("?" if x is None else str(x) for x in d) + "]"  # noqa: E731
                    out.append(f"{kind} {name!r} has shape {show(d2)}, the fp32 model's is {show(d1)}")
    return sorted(out)


def refuse_mismatch(name: str, fp32_model, brought_model) -> None:
    differences = mismatches(fp32_model, brought_model)
    if differences:
        raise ArtifactMismatch(
            f"artifact.{name} is not the same model as the fp32 upload: " + "; ".join(differences[:8])
            + (f" (and {len(differences) - 8} more)" if len(differences) > 8 else ""),
            hint="bring a quantized file of the uploaded fp32 model, with its inputs and outputs unchanged "
                 "(names, dtypes, shapes)", artifact=name, differences=differences)


def producer_of(model) -> str:
    """What the file says made it: producer_name/version, then the metadata and the Q/DQ ops' domains."""
    name, version = model.producer_name or "", model.producer_version or ""
    props = {p.key: p.value for p in model.metadata_props}
    said = f"{name} {version}".strip() or "no producer_name"
    clues = []
    if name in _KNOWN_PRODUCERS:
        clues.append(_KNOWN_PRODUCERS[name])
    for key in ("quantcompare.tool", "onnx.infer", "onnx.quant.pre_process"):
        if key in props:
            clues.append(f"{key}={props[key][:80]}")
    domains = Counter(n.domain or "ai.onnx" for n in all_nodes(model.graph) if n.op_type in QDQ_OPS)
    if domains:
        clues.append("Q/DQ in " + ", ".join(f"{d} x{c}" for d, c in sorted(domains.items())))
    return said + (f" ({'; '.join(clues)})" if clues else "")


def checked_brought_file(name: str, path: Path, fp32_model, budgets=None):
    """The brought file parsed under the upload's checks (safety, size budgets, opsets; no external data), and
    refused when it is not the fp32 model (``refuse_mismatch``). onnx.checker's structural check is left out:
    a tool's file can fail it and still run in ORT (Quark's XINT8 files are not topologically sorted)."""
    try:
        model = onnx_model_from_path(path, budgets=budgets, structural_check=False)
    except QuantCompareError as e:
        e.message = f"artifact.{name}: {e.message}"
        e.args = (e.message,)
        raise
    refuse_mismatch(name, fp32_model, model)
    return model


def brought_artifact(name: str, path: Path, out_path: Path, model) -> ToolInfo:
    """The brought file (``model``: it, checked) placed as ``out_path`` (the artifacts folder's
    ``<name>.onnx``), with what made it."""
    if path.resolve() != out_path.resolve():
        shutil.copyfile(path, out_path)
    producer = producer_of(model)
    return ToolInfo(name="brought file", version=model.producer_version or "", producer=producer,
                    settings={"producer_name": model.producer_name,
                              "producer_version": model.producer_version},
                    calibration="unknown: made outside this job (its scales are the file's own)",
                    notes=[f"brought as artifact.{name}; compared on this job's evaluation samples"])
