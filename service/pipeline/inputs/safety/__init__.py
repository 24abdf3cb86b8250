"""Safety layer: sniff uploads by content, check them statically, load them defensively.

The core calls, in order:

    fmt = sniff_model_format(path, allow_pt2=settings.allow_pt2)        # "onnx" | "pt2"
    model = onnx_model_from_path(path, budgets=..., allowed_data_files=...)   # external data OFF
    ep = exported_program_from_pt2(path, budgets=..., allow_pt2=...)          # static check, then load
    onnx_path = safe_extract_archive(archive, dest, budgets=...)              # .zip/.tar of model + data

Every refusal is a ``service.errors`` error with a stable code: ``invalid_model``,
``unsupported_model``, ``unsafe_archive`` or ``budget_exceeded`` (the message names the budget).
"""

from .archives import safe_extract_archive
from .budgets import DEFAULT_BUDGETS, Budgets, check_sample_bytes
from .onnx_checks import (
    ModelStats,
    check_input_elements,
    check_onnx_model,
    load_external_data_from_job_folder,
    onnx_model_from_path,
)
from .pt2_checks import Pt2Summary, check_pt2_archive, exported_program_from_pt2
from .sniff import ModelFormat, sniff_model_format

__all__ = [
    "DEFAULT_BUDGETS",
    "Budgets",
    "ModelFormat",
    "ModelStats",
    "Pt2Summary",
    "check_input_elements",
    "check_onnx_model",
    "check_pt2_archive",
    "check_sample_bytes",
    "exported_program_from_pt2",
    "load_external_data_from_job_folder",
    "onnx_model_from_path",
    "safe_extract_archive",
    "sniff_model_format",
]
