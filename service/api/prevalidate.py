"""Cheap checks of an upload in the API process, so most refusals are a 4xx at submit time.

The worker runs every check again (and more) before anything heavy: this is an early answer,
not the line of defence. Only pure-Python checks run here, on small uploads, off the event loop:

* the format sniffed by content (pickles, TorchScript, checkpoints, not-a-model bytes);
* ONNX: parsed with external data off, then the static walk and the budgets (no onnx C++
  checker, no onnxruntime: native code only ever sees hostile bytes inside a worker);
* .pt2: the static archive check (zipfile, json, pickletools; torch is never imported here);
* ONNX: the prepare stage's own pre-check (``inputs.stage.checked_input_shapes``: the .npz's keys,
  the resolved input shapes against ``max_input_elements``, generated samples' bytes), then a small
  calibration .npz against the model's inputs (shapes, dtypes, NaN/Inf).

Uploads larger than :data:`PREVALIDATE_MAX_BYTES` and .zip/.tar model archives are checked in
the worker only; their refusal is a job that ends ``failed`` with the same ``code``.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

from service.config import Settings
from service.errors import QuantCompareError
from service.pipeline.inputs.safety import check_pt2_archive, onnx_model_from_path, sniff_model_format
from service.pipeline.inputs.samples import samples_from_npz
from service.pipeline.inputs.sources import is_model_archive
from service.pipeline.inputs.specs import input_specs_from_onnx
from service.pipeline.inputs.stage import checked_input_shapes
# refuse_unknown_artifacts: the job's artifacts, checked before it is queued (the quantize stage checks them again)
from service.pipeline.quantize.tools.brought import checked_brought_file, refuse_unknown_artifacts  # noqa: F401
from service.schemas.options import ComparisonOptions

log = logging.getLogger("quantcompare.api")

PREVALIDATE_MAX_BYTES = 32 * 1024 * 1024
# The job function whose input contract these checks are (tests that inject their own skip them).
COMPARISON_JOB_FUNCTION = Settings.model_fields["job_function"].default


def applies(settings: Settings) -> bool:
    return settings.job_function == COMPARISON_JOB_FUNCTION


def prevalidate_upload(model_path: Path, calibration_path: Path | None, options: ComparisonOptions,
                       settings: Settings, *, brought: dict[str, Path] | None = None) -> None:
    """Raise the ``service.errors`` refusal the worker would raise, where it is cheap to know now."""
    try:
        model = _prevalidate(model_path, calibration_path, options, settings)
        if model is not None:
            for name, path in (brought or {}).items():
                if path.stat().st_size <= PREVALIDATE_MAX_BYTES:  # the upload checks, then artifact_mismatch
                    checked_brought_file(name, path, model, settings.budgets)
    except QuantCompareError:
        raise
    except Exception:  # a gap in the early checks is not the user's fault: the worker decides
        log.warning("pre-validation could not decide; the worker will", exc_info=True)


def _prevalidate(model_path: Path, calibration_path: Path | None, options: ComparisonOptions,
                 settings: Settings):
    """The checks; the parsed ONNX model (no weights) when it is one, for the brought files' comparison."""
    budgets = settings.budgets
    if model_path.stat().st_size > PREVALIDATE_MAX_BYTES or is_model_archive(model_path):
        return None
    fmt = sniff_model_format(model_path, allow_pt2=settings.allow_pt2)
    if fmt == "pt2":
        check_pt2_archive(model_path, budgets=budgets)
        return None
    model = onnx_model_from_path(model_path, budgets=budgets, structural_check=False)
    specs = input_specs_from_onnx(model)
    shapes, _ = checked_input_shapes(specs, options, calibration_path, budgets)  # the prepare stage's own checks
    if calibration_path is not None and _small_npz(calibration_path):
        samples_from_npz(calibration_path, specs, shapes, options, max_bytes=4 * PREVALIDATE_MAX_BYTES)
    return model


def _small_npz(path: Path) -> bool:
    if path.stat().st_size > PREVALIDATE_MAX_BYTES:
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            return sum(i.file_size for i in zf.infolist()) <= 4 * PREVALIDATE_MAX_BYTES
    except (zipfile.BadZipFile, OSError, ValueError):
        return True  # not a zip at all: samples_from_npz refuses it with invalid_calibration
