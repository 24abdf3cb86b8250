"""Where the fp32 model comes from: an uploaded ONNX file, an uploaded ``.pt2``, or an example.

A ``ModelSource`` answers two questions for the paths: the fp32 ONNX file (exported from torch
when the upload is torch), and a ``torch.export`` program for PT2E (converted from ONNX with
onnx2torch when the upload is ONNX; ``None`` with a reason when that is not possible).
torch is imported lazily: an ONNX-only job pays for it only when the PT2E path runs.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.errors import UnsupportedModel
from service.examples import get_example
from service.pipeline.files import file_sha256
from service.pipeline.inputs.pt2_batch import batch_dims_from_program
from service.pipeline.inputs.safety import exported_program_from_pt2, onnx_model_from_path, safe_extract_archive
from service.pipeline.inputs.specs import InputSpec, feedable, input_specs_from_onnx

BATCH_FOR_EXPORT = 2  # torch.export specializes a dynamic dim to 1 when the example batch is 1


@dataclass
class ModelSource:
    name: str
    format: str  # "onnx" | "pt2" | "example"
    sha256: str
    specs: list[InputSpec]
    onnx_path: Path | None = None  # the uploaded ONNX file
    onnx_model: Any = None  # its ModelProto, parsed without external data
    program: Any = None  # torch.export.ExportedProgram (pt2 upload / example)
    data_files: list[Path] = field(default_factory=list)  # external data next to onnx_path
    # data_files in the user's own folder (the CLI): copied into the artifacts, never moved
    data_files_are_the_users: bool = False
    batch_dims: dict[str, int] = field(default_factory=dict)  # symbol -> default (a .pt2's leading symbols)
    notes: list[str] = field(default_factory=list)


def source_from_example(name: str) -> ModelSource:
    import torch
    from torch.export import export

    example = get_example(name)
    module = example.factory()
    specs = [InputSpec(i.name, i.dtype, tuple(i.shape)) for i in example.inputs]
    args = example_args(specs, {s.name: tuple(1 if isinstance(d, str) else d for d in s.shape) for s in specs})
    with torch.no_grad():
        program = export(module, args, dynamic_shapes=dynamic_shapes_for(specs))
    digest = hashlib.sha256(f"example:{name}".encode()).hexdigest()
    return ModelSource(name=name, format="example", sha256=digest, specs=specs, program=program)


def source_from_pt2(path: Path, *, name: str, budgets=None, allow_pt2: bool = True) -> ModelSource:
    program = exported_program_from_pt2(path, budgets=budgets, allow_pt2=allow_pt2)
    specs = specs_from_program(program)
    if not specs:  # as an ONNX upload without graph inputs is (safety.onnx_checks)
        raise UnsupportedModel("The .pt2 program takes no inputs, so there is nothing to calibrate or compare.",
                               hint="Export the model with its real inputs as arguments: "
                                    "torch.export.export(model, (example_input,)).")
    refuse_non_tensor_outputs(program)
    return ModelSource(name=name, format="pt2", sha256=file_sha256(path), specs=specs, program=program,
                       batch_dims=batch_dims_from_program(program, [s.shape[0] for s in specs if s.shape]))


def source_from_onnx(path: Path, *, name: str, budgets=None, allowed_data_files=None) -> ModelSource:
    model = onnx_model_from_path(path, budgets=budgets, allowed_data_files=allowed_data_files)
    return ModelSource(name=name, format="onnx", sha256=file_sha256(path), specs=input_specs_from_onnx(model),
                       onnx_path=path, onnx_model=model)


def source_from_onnx_with_local_data(path: Path, *, name: str, budgets=None) -> ModelSource:
    """An ONNX file read where it lies (the CLI): external data files beside it are the user's own, as
    ``torch.onnx.export(dynamo=True)`` writes ``model.onnx`` + ``model.onnx.data`` by default. The same
    checks as an archive's (plain names in the model's folder, in range, no links), and the files are
    copied, not moved, into the job's artifacts."""
    import onnx

    beside = {p.name for p in path.parent.iterdir() if p.is_file() and p.name != path.name}
    source = source_from_onnx(path, name=name, budgets=budgets, allowed_data_files=beside)
    locations = {e.value for t in source.onnx_model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
                 for e in t.external_data if e.key == "location"}
    source.data_files = [path.parent / loc for loc in sorted(locations)]
    source.data_files_are_the_users = True
    return source


def is_model_archive(path: Path) -> bool:
    """A .zip / .tar(.gz) of an ONNX model and its external data (not a torch.export .pt2 zip)."""

    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, OSError):
            return False
        return any(n.lower().endswith(".onnx") for n in names) and not any(n.endswith("/archive_format") for n in names)
    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def source_from_archive(path: Path, dest: Path, *, name: str, budgets=None) -> ModelSource:
    """Extract model + external data into the job's own folder, then load the model *by path* from there."""

    onnx_path = safe_extract_archive(path, dest, budgets=budgets)
    data_files = {p.name for p in dest.iterdir() if p.is_file()} - {onnx_path.name}
    source = source_from_onnx(onnx_path, name=name, budgets=budgets, allowed_data_files=data_files)
    source.sha256 = file_sha256(path)  # the upload as sent identifies the job
    source.data_files = [dest / n for n in sorted(data_files)]
    return source


def specs_from_program(program) -> list[InputSpec]:
    """User inputs of an ExportedProgram, with symbolic dims named as torch.export named them."""
    import torch

    user_inputs = set(program.graph_signature.user_inputs)
    specs = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise UnsupportedModel(f"input {node.name!r} of the .pt2 is not a tensor",
                                   hint="export a model whose inputs are tensors")
        dims = tuple(int(d) if isinstance(d, int) else str(d) for d in val.shape)
        specs.append(feedable(InputSpec(node.name, str(val.dtype).removeprefix("torch."), dims)))
    return specs


def refuse_non_tensor_outputs(program) -> None:
    """An output that is a Python number, None or a symbolic int (``x.shape[0]``) has no ONNX form:
    torch.onnx.export fails on it deep inside (an internal error before), and nothing compares it."""
    from torch.export.graph_signature import OutputKind, TensorArgument

    user = [o for o in program.graph_signature.output_specs if o.kind == OutputKind.USER_OUTPUT]
    for i, spec in enumerate(user):
        if not isinstance(spec.arg, TensorArgument):
            kind = type(spec.arg).__name__
            what = {"ConstantArgument": f"the constant {getattr(spec.arg, 'value', None)!r}",
                    "SymIntArgument": "a symbolic int (a size such as x.shape[0])", "SymFloatArgument": "a symbolic float",
                    "SymBoolArgument": "a symbolic bool"}.get(kind, f"a {kind.removesuffix('Argument')}")
            raise UnsupportedModel(
                f"output {i} of the .pt2 is {what}, not a tensor: it has no ONNX form to quantize or compare",
                hint="return only tensors from forward() (drop the number, or wrap it: torch.tensor(...)), export "
                     "and save the .pt2 again")


def dynamic_shapes_for(specs: list[InputSpec]):
    """torch.export dynamic_shapes: a named ``batch`` for a symbolic dim 0, AUTO for other symbolic dims."""
    from torch.export import Dim

    batch = Dim("batch")
    out = []
    for s in specs:
        dims = {}
        for i, d in enumerate(s.shape):
            if not isinstance(d, int):
                dims[i] = batch if i == 0 else Dim.AUTO
        out.append(dims or None)
    return tuple(out)


def example_args(specs: list[InputSpec], shapes: dict[str, tuple[int, ...]]):
    """Example tensors for export: the resolved shapes, with a symbolic batch widened to >= 2."""
    import torch

    args = []
    for s in specs:
        shape = list(shapes[s.name])
        if s.shape and not isinstance(s.shape[0], int):
            shape[0] = max(shape[0], BATCH_FOR_EXPORT)
        dtype = getattr(torch, s.dtype)
        if dtype.is_floating_point:
            args.append(torch.randn(shape, dtype=dtype))
        elif dtype == torch.bool:
            args.append(torch.zeros(shape, dtype=dtype))
        else:
            args.append(torch.ones(shape, dtype=dtype))
    return tuple(args)


def copy_upload(src: Path, dest: Path) -> Path:
    """``dest`` (``<job>/artifacts/fp32.onnx``) with ``src``'s bytes: a hard link when ``src`` is a file
    of the same job folder (the service's ``input/``: no second copy of a large model), else a copy.
    A CLI model lies where its user keeps it, and a link would tie the report's fp32 file to that
    file: saving the model again in place would change the earlier run's reference under its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        if dest.samefile(src):  # a run again into the same job folder: the link is already there
            return dest
        dest.unlink()  # an earlier run's file (of another model, or a copy of this one)
    if src.resolve().is_relative_to(dest.parent.parent.resolve()):
        try:
            dest.hardlink_to(src)
            return dest
        except OSError:
            pass
    shutil.copyfile(src, dest)
    return dest
