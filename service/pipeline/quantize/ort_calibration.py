"""ORT's own calibrator on a model whose weights stay in external data, writing quantize_static's cache.

``quantize_static`` holds a large model several times over while it calibrates: its own copy
(``load_model_with_shape_infer``), the calibrator's second copy, the augmented model serialized
to bytes to save it, and the calibration session's. For a 1 GB model with external data that
peaked at 4.4 GB here (``docs/history/notes.md``, issue 16). ORT's calibrator needs the graph only: it
adds ReduceMin/ReduceMax (or histogram) outputs and runs a session. So the same calibrator class
runs here on the graph alone, its augmented graph saved beside the weights it refers to, and the
ranges it computes go where ``quantize_static`` reads its calibration cache
(``calibration_cache_path``, ORT's ``save_tensors_data``): ``quantize_static`` then calibrates
nothing and the weights are held by one session at a time. The ranges are ORT's, computed by
ORT's code on the same samples; a test holds them equal to ``quantize_static``'s own.

Only where that is the whole of what ``quantize_static`` would do before calibrating: external
weights, no opset change (``update_opset_version`` returns the model as is), no SmoothQuant and
no strided calibration. Anything else is left to ``quantize_static`` as usual.
"""

from __future__ import annotations

import logging
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from service.pipeline.files import has_external_initializers, inline_small_external_tensors
from service.pipeline.isolation import first_line

__all__ = ["calibrated_with_weights_on_disk", "default_op_types", "tensors_without_finite_range"]

# quantize_static's extra_options -> create_calibrator's (onnxruntime/quantization/quantize.py,
# ``calib_extra_options_keys`` in ORT 1.32).
_CALIBRATOR_OPTIONS = {
    "CalibTensorRangeSymmetric": "symmetric",
    "CalibMovingAverage": "moving_average",
    "CalibMovingAverageConstant": "averaging_constant",
    "CalibMaxIntermediateOutputs": "max_intermediate_outputs",
    "CalibPercentile": "percentile",
}
_LOADER_LOCK = threading.Lock()
log = logging.getLogger(__name__)


def default_op_types() -> list[str]:
    """quantize_static's op_types_to_quantize when none is given (quantize.py: the union of QLinearOpsRegistry
    and QDQRegistry, whatever the format), which its calibrator measures too."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))


def calibrated_with_weights_on_disk(model_path: Path, reader, cache_path: Path, *, calibrate_method,
                                    activation_type, weight_type, op_types: list[str] | None,
                                    extra_options: dict[str, Any]) -> str | None:
    """Write ORT's calibration ranges for ``model_path`` to ``cache_path`` with the weights left on
    disk; the tool note that says so. None (nothing written) when the model or the settings are outside
    what this covers. If it fails, nothing is written either and the note says quantize_static calibrates."""
    try:
        done = _ranges_to_cache(model_path, reader, cache_path, calibrate_method=calibrate_method,
                                activation_type=activation_type, weight_type=weight_type, op_types=op_types,
                                extra_options=extra_options)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - ORT's own calibration inside quantize_static is the fallback
        log.info("calibration with the weights on disk failed, quantize_static calibrates: %r", e)
        cache_path.unlink(missing_ok=True)
        return (f"calibration with the weights left on disk failed ({first_line(e)}); "
                "quantize_static calibrated with the model in memory")
    if not done:
        return None
    return ("calibrated by ORT's own calibrator with the weights left in external data (its ranges go to "
            "quantize_static's calibration cache; quantize_static then calibrates nothing)")


def _ranges_to_cache(model_path: Path, reader, cache_path: Path, *, calibrate_method, activation_type, weight_type,
                     op_types: list[str] | None, extra_options: dict[str, Any]) -> bool:
    import onnx
    from onnxruntime.quantization.calibrate import TensorsData, create_calibrator, save_tensors_data
    from onnxruntime.quantization.quant_utils import update_opset_version

    if extra_options.get("SmoothQuant") or extra_options.get("CalibStridedMinMax"):
        return False
    graph = onnx.load(str(model_path), load_external_data=False)
    if not has_external_initializers(graph):
        return False
    if update_opset_version(graph, weight_type, activation_type,
                            tensor_quant_overrides=extra_options.get("TensorQuantOverrides"),
                            block_size=extra_options.get("BlockSize", 0)) is not graph:
        return False  # quantize_static would calibrate an opset-converted copy
    del graph
    op_types = op_types or default_op_types()
    calibrator_options = {v: extra_options[k] for k, v in _CALIBRATOR_OPTIONS.items() if k in extra_options}
    # Beside the model, so the augmented graph's external-data references resolve to the same file.
    augmented = model_path.with_name(f".{model_path.stem}.augmented.onnx")
    try:
        with _calibrator_reads_graph_only():
            calibrator = create_calibrator(model_path, op_types, augmented_model_path=str(augmented),
                                           calibrate_method=calibrate_method, extra_options=calibrator_options)
        calibrator.collect_data(reader)
        ranges = calibrator.compute_data()
        del calibrator  # its session holds the weights: gone before quantize_static loads them
    finally:
        augmented.unlink(missing_ok=True)
    if not isinstance(ranges, TensorsData):
        return False
    save_tensors_data(ranges, cache_path, smooth_quant=False)
    return True


@contextmanager
def _calibrator_reads_graph_only():
    """ORT's calibrator loads its model with ``load_model_with_shape_infer`` (ONNX shape inference,
    then ``onnx.load`` with every weight); this is the same without reading the external weights."""
    import onnx
    from onnxruntime.quantization.quant_utils import add_infer_metadata, generate_identified_filename

    calibrate = sys.modules["onnxruntime.quantization.calibrate"]

    def graph_only(model_path: Path):
        inferred = generate_identified_filename(Path(model_path), "-inferred")
        onnx.shape_inference.infer_shapes_path(str(model_path), str(inferred))
        try:
            model = onnx.load(str(inferred), load_external_data=False)
        finally:
            inferred.unlink(missing_ok=True)
        # The weights stay on disk, but ORT's own shape inference reads a Reshape's target shape and the
        # like from the graph: those (integer and small) constants come into it, as they would in ORT's copy.
        inline_small_external_tensors(model, Path(model_path).parent)
        add_infer_metadata(model)
        return model

    with _LOADER_LOCK:
        original = calibrate.load_model_with_shape_infer
        calibrate.load_model_with_shape_infer = graph_only
        try:
            yield
        finally:
            calibrate.load_model_with_shape_infer = original


def tensors_without_finite_range(cache_path: Path, model_path: Path) -> list[tuple[str, str, str]]:
    """``(tensor, producer op, producer name)`` in graph order for each tensor whose range in ORT's
    calibration cache holds NaN or inf; empty when every range is finite or the cache is unreadable.

    ORT's MinMax calibrator (``MinMaxCalibrater.compute_data``) takes ``nanmin``/``nanmax`` over the
    samples of each tensor's ReduceMin/ReduceMax, so a NaN range means a NaN in every sample, and an
    inf range an inf in one: ``compute_scale_zp`` then asserts "scale issue", or writes an inf scale.
    An empty tensor's range is (+inf, -inf), the identity of min and max over nothing: not counted."""
    import numpy as np
    import onnx
    from onnxruntime.quantization.calibrate import load_tensors_data

    try:
        ranges = load_tensors_data(cache_path).data
        graph = onnx.load(str(model_path), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - a diagnosis must not raise over the failure it explains
        return []
    def nonfinite(td) -> bool:
        low, high = (np.asarray(v, dtype=np.float64) for v in td.range_value)
        if np.all(low == np.inf) and np.all(high == -np.inf):
            return False  # an empty tensor (a dim of 0): the reduction identity, no value the model computes
        return not (np.isfinite(low).all() and np.isfinite(high).all())

    bad = {name for name, td in ranges.items() if nonfinite(td)}
    found = [(i.name, "graph input", "") for i in graph.input if i.name in bad]
    found += [(out, n.op_type, n.name) for n in graph.node for out in n.output if out in bad]
    return found
