"""ORT paths: ``quant_pre_process`` once, then ``quantize_static`` in QDQ and in QOperator format."""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from service.pipeline.inputs.samples import Feed
from service.pipeline.quantize.ort_fixups import failure_from_ort_quantizer
from service.schemas.report import ToolInfo

log = logging.getLogger(__name__)

_CALIBRATION_NAMES = {
    "minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile", "distribution": "Distribution",
}


def preprocessed_for_ort(fp32_path: Path, out_path: Path) -> tuple[Path, str]:
    """Run ORT's recommended pre-processing (shape inference + basic optimization).

    It fails on many real models (symbolic shape inference); quantization then goes on from the
    fp32 file, and the returned note says so. Both ORT formats share the one result.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        with _cwd(out_path.parent):
            quant_pre_process(str(fp32_path.resolve()), str(out_path.resolve()))
        return out_path, "quant_pre_process: ok (shape inference + ORT basic optimization before quantizing)"
    except Exception as e:  # noqa: BLE001 - any failure here is survivable by design
        log.info("quant_pre_process failed: %r", e)
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        return fp32_path, f"quant_pre_process failed ({type(e).__name__}: {first}); quantized the fp32 file as is"


_CWD_LOCK = threading.Lock()


@contextmanager
def _cwd(folder: Path):
    """ORT's symbolic shape inference saves ``sym_shape_infer_temp.onnx`` (+ data) into the current
    directory when it gives up; keep that debris in the job's scratch folder, not wherever we run."""
    with _CWD_LOCK:
        before = os.getcwd()
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(before)


class _FeedReader:
    """CalibrationDataReader over the job's shared calibration samples."""

    def __init__(self, feeds: list[Feed], input_names: list[str]):
        self._feeds = feeds
        self._names = input_names
        self._i = 0

    def get_next(self):
        if self._i >= len(self._feeds):
            return None
        feed = self._feeds[self._i]
        self._i += 1
        return {n: feed[n] for n in self._names}

    def rewind(self):
        self._i = 0


def quantized_by_ort(
    model_path: Path, out_path: Path, calibration: list[Feed], input_names: list[str], *,
    quant_format: str, settings: dict[str, Any], pre_process_note: str | None = None,
    calibration_cache: Path | None = None,
) -> ToolInfo:
    """``calibration_cache``: a JSON file in the job's scratch folder. The first format to run
    writes the tensor ranges there and the second reads them: both formats calibrate the same
    tensors (the union of ORT's QDQ and QOperator op lists) on the same samples, so the ranges
    are identical and the calibration inference runs once per job instead of twice."""
    import onnxruntime
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

    reader = type("Reader", (_FeedReader, CalibrationDataReader), {})(calibration, input_names)
    qtypes = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    kwargs = dict(
        quant_format=QuantFormat.QDQ if quant_format == "qdq" else QuantFormat.QOperator,
        per_channel=settings["per_channel"],
        reduce_range=settings["reduce_range"],
        activation_type=qtypes[settings["activation_type"]],
        weight_type=qtypes[settings["weight_type"]],
        calibrate_method=getattr(CalibrationMethod, _CALIBRATION_NAMES[settings["calibrate_method"]]),
        extra_options=dict(settings["extra_options"]),
    )
    if settings.get("op_types_to_quantize"):
        kwargs["op_types_to_quantize"] = settings["op_types_to_quantize"]
    if settings.get("nodes_to_exclude"):
        kwargs["nodes_to_exclude"] = settings["nodes_to_exclude"]
    if calibration_cache is not None:
        kwargs["calibration_cache_path"] = str(calibration_cache)
    try:
        quantize_static(str(model_path), str(out_path), reader, **kwargs)
    except Exception as e:  # noqa: BLE001 - name ORT's function and the model trait, not just a traceback
        raise failure_from_ort_quantizer(e, quant_format) from e
    shown = {k: v for k, v in settings.items() if k != "pre_process"}
    shown["quant_format"] = "QDQ" if quant_format == "qdq" else "QOperator"
    notes = [pre_process_note] if pre_process_note else []
    return ToolInfo(
        name=f"onnxruntime.quantization.quantize_static ({shown['quant_format']})",
        version=f"onnxruntime {onnxruntime.__version__}",
        settings=shown,
        calibration=f"{_CALIBRATION_NAMES[settings['calibrate_method']]} calibrator over {len(calibration)} samples",
        notes=notes,
    )
