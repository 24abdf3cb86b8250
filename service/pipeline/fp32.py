"""The fp32 reference artifact: the uploaded ONNX, or torch.onnx.export(dynamo=True) of the program."""

from __future__ import annotations

from pathlib import Path

from service.pipeline.sources import ModelSource, copy_upload


def fp32_onnx_from_source(source: ModelSource, out_path: Path) -> Path:
    if source.onnx_path is not None:
        return copy_upload(source.onnx_path, out_path)
    import onnx
    import torch

    # Exporting the ExportedProgram itself keeps its dynamic dims and avoids a second torch.export.
    with torch.no_grad():
        program = torch.onnx.export(source.program, dynamo=True, verbose=False)
    if program is None:
        raise RuntimeError("torch.onnx.export returned no program")
    onnx.save(program.model_proto, out_path)
    return out_path
