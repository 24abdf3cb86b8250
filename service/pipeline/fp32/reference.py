"""The fp32 reference artifact: the uploaded ONNX (its sparse initializers written dense, its
shapeless graph outputs given the shapes inference finds, its nodes in topological order), or
torch.onnx.export(dynamo=True) of the program."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from service.errors import UnsupportedModel
from service.pipeline.inputs.node_order import sort_nodes
from service.pipeline.inputs.output_shapes import outputs_given_inferred_shapes
from service.pipeline.inputs.sources import ModelSource, copy_upload
from service.pipeline.inputs.sparse import densify_sparse_initializers
from service.pipeline.isolation import first_line, out_of_memory


def fp32_onnx_from_source(source: ModelSource, out_path: Path) -> Path:
    if source.onnx_path is not None and source.data_files:
        # An extracted archive lives in the job's own folder: move model + external data into the
        # artifacts (a rename, free even for GBs; onnx refuses hard-linked data files, and the data
        # is found relative to the model file); a CLI user's files are copied. Later paths read the
        # model from its new place.
        place = shutil.copyfile if source.data_files_are_the_users else os.replace
        for data in source.data_files:
            place(data, out_path.parent / data.name)
        place(source.onnx_path, out_path)
        source.onnx_path = out_path
        source.data_files = [out_path.parent / d.name for d in source.data_files]
        return out_path
    shaped = outputs_given_inferred_shapes(source.onnx_model) if source.onnx_model is not None else []
    if shaped:
        source.notes.append(f"graph output(s) {', '.join(repr(n) for n in shaped[:5])} declared no shape; the fp32 "
                            "reference is written with the shapes ONNX shape inference gives (ORT computes the "
                            "same values either way)")
    moved = sort_nodes(source.onnx_model.graph) if source.onnx_model is not None else 0
    if moved:
        source.notes.append(f"the upload lists nodes before the nodes whose outputs they read ({moved} moved); the "
                            "fp32 reference is written with its nodes in topological order, as ONNX requires and ORT "
                            "sorts them when it loads a graph (the same computation)")
    if source.onnx_model is not None and (source.onnx_model.graph.sparse_initializer or shaped or moved):
        import onnx

        if source.onnx_model.graph.sparse_initializer:
            source.notes.append(densify_sparse_initializers(source.onnx_model))
        onnx.save(source.onnx_model, out_path)
        source.onnx_path = out_path  # every path reads the rewritten file
        return out_path
    if source.onnx_path is not None:
        return copy_upload(source.onnx_path, out_path)
    import onnx
    import torch

    # Exporting the ExportedProgram itself keeps its dynamic dims and avoids a second torch.export.
    try:
        with torch.no_grad():
            program = torch.onnx.export(source.program, dynamo=True, verbose=False)
    except Exception as e:  # noqa: BLE001 - an op the exporter has no ONNX function for is the model's trait
        if out_of_memory(e):  # the machine's state, said as such upstream, not the model's
            raise
        cause = e
        while cause.__cause__ is not None:  # the exporter's own words are pages; the innermost names the op
            cause = cause.__cause__
        raise UnsupportedModel(
            f"torch.onnx.export(dynamo=True) cannot convert this program to ONNX, so there is no fp32 reference to "
            f"quantize or compare: {first_line(cause)}",
            hint="replace the op it names (or export the model to ONNX yourself and upload the .onnx), then try again",
        ) from e
    if program is None:
        raise RuntimeError("torch.onnx.export returned no program")
    model = program.model_proto
    _name_dynamic_dims(model, source.specs)
    onnx.save(model, out_path)
    return out_path


def _name_dynamic_dims(model, specs) -> None:
    """Exporting an ExportedProgram names dynamic dims by torch's symbols (``s77``); give them the
    names the model's inputs declare (``batch``), so the file reads well and a re-upload resolves
    its batch dim without options."""
    renames: dict[str, str] = {}
    by_name = {s.name: s for s in specs}
    for vi in model.graph.input:
        spec = by_name.get(vi.name)
        if spec is None:
            continue
        for dim, want in zip(vi.type.tensor_type.shape.dim, spec.shape):
            if dim.dim_param and isinstance(want, str) and want.isidentifier():
                renames.setdefault(dim.dim_param, want)
    if not renames:
        return
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        if vi.type.HasField("tensor_type"):
            for dim in vi.type.tensor_type.shape.dim:
                if dim.dim_param in renames:
                    dim.dim_param = renames[dim.dim_param]
