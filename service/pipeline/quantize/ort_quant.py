"""ORT paths: ``quant_pre_process`` once, then ``quantize_static`` in QDQ and in QOperator format."""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from service.errors import NonFiniteCalibration, OrtFileRejected
from service.pipeline.files import has_external_initializers, inline_small_external_tensors
from service.pipeline.inputs.samples import Feed
from service.pipeline.inputs.stored_nonfinite import nonfinite_scales
from service.pipeline.isolation import NONFINITE_HINT, first_line, scrub
from service.pipeline.quantize.ort_calibration import calibrated_with_weights_on_disk, default_op_types
from service.pipeline.quantize.ort_fixups import failure_from_ort_quantizer
from service.pipeline.quantize.ort_nonfinite import constant_nonfinite, retry_cache
from service.pipeline.quantize.toolchain_patches.ort import install_minmax_augment_shortcut, install_quantizer_shortcuts
from service.pipeline.ort.sessions import ort_refusal, session_options_for, session_with_options
from service.pipeline.vocabulary import ai_onnx_opset, all_nodes, graph_from_path
from service.schemas.report import ToolInfo

log = logging.getLogger(__name__)

_CALIBRATION_NAMES = {
    "minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile", "distribution": "Distribution",
}


def preprocessed_for_ort(fp32_path: Path, out_path: Path) -> tuple[Path, str]:
    """Run ORT's recommended pre-processing (shape inference + basic optimization).

    Its first step, ORT's symbolic shape inference, fails on many real models ("Incomplete symbolic
    shape inference": an op it has no rule for, such as ai.onnx.ml's Scaler, or PaddleOCR's and
    MiniLM exports); quant_pre_process's own ``skip_symbolic_shape=True`` then runs the other two
    steps, so ORT's basic optimization (the Conv+BatchNorm folding among them) still happens before
    quantizing. When both fail, quantization goes on from the fp32 file. The returned note says which.
    Both ORT formats share the one result. A model whose weights are in external data goes through
    the same steps with its weights left on disk (``_pre_process_weights_on_disk``).
    """
    try:
        return out_path, "quant_pre_process: " + _pre_processed(fp32_path, out_path, skip_symbolic=False)
    except Exception as e:  # noqa: BLE001 - any failure here is survivable by design
        log.info("quant_pre_process failed: %r", e)
        first = first_line(e)
    as_is = f"quant_pre_process failed ({first}); quantized the fp32 file as is"
    try:
        how = _pre_processed(fp32_path, out_path, skip_symbolic=True)
    except Exception as e:  # noqa: BLE001
        log.info("quant_pre_process(skip_symbolic_shape=True) failed: %r", e)
        return fp32_path, as_is
    lost = _untyped_outputs(out_path) - _untyped_outputs(fp32_path)
    if lost:
        # ORT's basic optimization removes a float -> float Cast, and with it the only type ONNX shape
        # inference had after an op it cannot infer (ai.onnx.ml's Scaler): quantize_static then skips
        # every untyped tensor, and the file it writes quantizes weights only.
        try:
            how = _pre_processed(fp32_path, out_path, skip_symbolic=True, skip_optimization=True)
        except Exception as e:  # noqa: BLE001
            log.info("quant_pre_process(skip_optimization=True) failed: %r", e)
            return fp32_path, as_is
        return out_path, (f"quant_pre_process failed ({first}); run again with skip_symbolic_shape=True, whose ORT "
                          f"basic optimization left {len(lost)} tensor(s) without a type (e.g. {sorted(lost)[0]!r}: a "
                          "Cast it removed typed them), so a third time without that optimization: " + how)
    return out_path, (f"quant_pre_process failed ({first}); run again with skip_symbolic_shape=True, its ORT basic "
                      f"optimization and ONNX shape inference: {how}")


def _untyped_outputs(path: Path) -> set[str]:
    """Node outputs of the main graph that ONNX shape inference gives no element type (the weights are
    not read); quantize_static, which infers the same way, leaves such tensors unquantized."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))
    g = model.graph
    typed = {v.name for v in (*g.value_info, *g.output, *g.input) if v.type.tensor_type.elem_type}
    return {o for n in g.node for o in n.output if o and o not in typed}


def _pre_processed(fp32_path: Path, out_path: Path, *, skip_symbolic: bool, skip_optimization: bool = False) -> str:
    """quant_pre_process of ``fp32_path`` into ``out_path``; how it went, for the note. Raises as it does."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with _cwd(out_path.parent):
        graph = _weights_on_disk(fp32_path)
        if graph is not None:
            _pre_process_weights_on_disk(fp32_path, graph, out_path, skip_symbolic=skip_symbolic,
                                         skip_optimization=skip_optimization)
            return "ok, its steps with the weights left in external data"
        with _ort_log_records("onnxruntime.quantization.shape_inference") as records:
            quant_pre_process(str(fp32_path.resolve()), str(out_path.resolve()), skip_symbolic_shape=skip_symbolic,
                              skip_optimization=skip_optimization)
    if skip_optimization:
        return "ok (ONNX shape inference only before quantizing)"
    if any("Optimization Failed" in r for r in records):
        return f"its ORT basic optimization failed ({_last_line(records)}); quantized its shape-inferred graph"
    return "ok (shape inference + ORT basic optimization before quantizing)"


def _weights_on_disk(fp32_path: Path):
    """The graph (external data not loaded) when its initializers live in external data and its
    opset needs no Upsample rewrite (quant_pre_process's opset <= 10 step loads every weight); else None."""
    import onnx

    graph = onnx.load(str(fp32_path), load_external_data=False)
    external = has_external_initializers(graph)
    opset = ai_onnx_opset(graph)
    return graph if external and opset is not None and opset > 10 else None


def _pre_process_weights_on_disk(fp32_path: Path, graph, out_path: Path, *, skip_symbolic: bool = False,
                                 skip_optimization: bool = False) -> None:
    """quant_pre_process's steps (onnxruntime/quantization/shape_inference.py) without reading the weights.

    ``quant_pre_process`` loads every weight into Python, copies the model for symbolic shape
    inference, then has ORT write the optimized model inline: a 1 GB model peaked at 5.5 GB of
    RSS here, and a model over 2 GB cannot be written inline at all. The same steps on the graph
    alone: symbolic shape inference needs shapes and the values of small constants (read into the
    graph: ``files.inline_small_external_tensors``); the graph is saved next to its data
    so the references resolve; ORT optimizes at basic and writes the weights to a file of its own
    beside ``out_path``; ONNX shape inference runs on the paths. ``skip_optimization``: ORT writes the
    graph at ``disable_all`` instead, only to move the weights beside ``out_path``.
    """
    import onnx
    from onnxruntime.quantization.quant_utils import add_pre_process_metadata
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    fp32_path, out_path = Path(fp32_path).resolve(), Path(out_path).resolve()  # the cwd is the scratch folder
    inline_small_external_tensors(graph, fp32_path.parent)
    inferred = graph if skip_symbolic else SymbolicShapeInference.infer_shapes(graph, 2**31 - 1, False, False, 0)
    beside_data = fp32_path.with_name(f".{out_path.stem}.symbolic.onnx")
    optimized = out_path.with_name(f"{out_path.stem}.optimized.onnx")
    try:
        onnx.save(inferred, str(beside_data))
        so = session_options_for("disable_all" if skip_optimization else "basic", optimized_model_path=optimized,
                                 external_initializers_file=f"{out_path.name}.data")
        del inferred
        session_with_options(beside_data, so)
    finally:
        beside_data.unlink(missing_ok=True)
    onnx.shape_inference.infer_shapes_path(str(optimized), str(out_path))
    optimized.unlink(missing_ok=True)
    final = onnx.load(str(out_path), load_external_data=False)
    add_pre_process_metadata(final)
    onnx.save(final, str(out_path))


@contextmanager
def _ort_log_records(name: str):
    """The messages ORT's quantization tools log at warning and above under ``name``, kept out of
    the process's output: quant_pre_process logs a failed optimization step with its traceback and
    goes on, which printed a traceback into the CLI's output and left the note saying "ok"."""
    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger, handler = logging.getLogger(name), _Keep(logging.WARNING)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _last_line(records: list[str]) -> str:
    """The exception line of the last traceback logged (ORT's own message), scrubbed of paths."""
    lines = [ln for r in records for ln in r.splitlines() if ln.strip()]
    return scrub(lines[-1])[:300] if lines else "no message"


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


# calibrate.py create_calibrator: EntropyCalibrater(num_bins=128, num_quantized_bins=128), and
# quantize_static passes no extra_options key for either (quantize.py calib_extra_options_keys);
# get_entropy_threshold tries range(num_quantized_bins // 2, num_bins // 2 + 1): one candidate.
ENTROPY_NOTE = ("ORT's Entropy calibrator ran with the 128 histogram bins and 128 quantized bins quantize_static "
                "gives it (no option reaches them), so its KL search has one candidate threshold, the whole "
                "histogram: the ranges are MinMax's, and no outlier is clipped (use 'percentile' to clip)")


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
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType

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
    notes = [pre_process_note] if pre_process_note else []
    if settings["calibrate_method"] == "entropy":
        notes.append(ENTROPY_NOTE)
    install_minmax_augment_shortcut()  # ORT's MinMax calibrator, same augmented graph, in linear time
    install_quantizer_shortcuts()  # quantize_static's per-tensor graph scans, same file, fewer Python steps
    shown = {k: v for k, v in settings.items() if k != "pre_process"}
    try:
        _calibrated_and_quantized(Path(model_path), out_path, reader, kwargs, quant_format, calibration_cache, notes)
    except NonFiniteCalibration as e:
        op_types = kwargs.get("op_types_to_quantize") or default_op_types()
        found = constant_nonfinite(Path(model_path), calibration_cache, op_types)
        if found is None:
            raise
        if not found.retry:
            raise found.error(e, quant_format, retried=False) from e
        kwargs["op_types_to_quantize"] = found.remaining
        reader.rewind()
        try:
            _calibrated_and_quantized(Path(model_path), out_path, reader, kwargs, quant_format,
                                      retry_cache(calibration_cache, found.left_out), notes)
        except NonFiniteCalibration as again:
            raise found.error(again, quant_format, retried=True) from again
        notes.append(found.note())
        shown["op_types_to_quantize"] = found.remaining
    unknown = _unknown_excluded(settings.get("nodes_to_exclude"), Path(model_path))
    if unknown:  # quantize_static ignores them without a word: a misspelt name would keep nothing in float
        notes.append(f"options.ort.nodes_to_exclude names {len(unknown)} node(s) the file quantize_static read does "
                     f"not have, so they excluded nothing: {', '.join(repr(n) for n in unknown[:_NAMED])}"
                     f"{' ...' if len(unknown) > _NAMED else ''} (check the spelling against the node names of "
                     "artifacts/fp32.onnx)")
    shown["quant_format"] = "QDQ" if quant_format == "qdq" else "QOperator"
    return ToolInfo(
        name=f"onnxruntime.quantization.quantize_static ({shown['quant_format']})",
        version=f"onnxruntime {onnxruntime.__version__}",
        settings=shown,
        calibration=f"{_CALIBRATION_NAMES[settings['calibrate_method']]} calibrator over {len(calibration)} samples",
        notes=notes,
    )


def _calibrated_and_quantized(model_path: Path, out_path: Path, reader, kwargs: dict, quant_format: str,
                              calibration_cache: Path | None, notes: list[str]) -> None:
    """quantize_static into ``out_path``, its ranges through ``calibration_cache`` (written here first when
    the weights stay on disk), the file it wrote checked: ORT loads it, and no scale is inf or NaN."""
    from onnxruntime.quantization import quantize_static

    kwargs = dict(kwargs)
    if calibration_cache is not None:
        kwargs["calibration_cache_path"] = str(calibration_cache)
    if calibration_cache is not None and not calibration_cache.is_file():
        note = calibrated_with_weights_on_disk(
            model_path, reader, calibration_cache, calibrate_method=kwargs["calibrate_method"],
            activation_type=kwargs["activation_type"], weight_type=kwargs["weight_type"],
            op_types=kwargs.get("op_types_to_quantize"), extra_options=kwargs["extra_options"])
        if note and note not in notes:
            notes.append(note)
        reader.rewind()
    try:
        quantize_static(str(model_path), str(out_path), reader, **kwargs)
    except Exception as e:  # noqa: BLE001 - name ORT's function and the model trait, not just a traceback
        raise failure_from_ort_quantizer(e, quant_format, model_path, calibration_cache) from e
    _ort_loads(out_path, quant_format)
    _refuse_nonfinite_scales(out_path, quant_format, model_path)


def _unknown_excluded(names: list[str] | None, model_path: Path) -> list[str]:
    if not names:
        return []
    known = {n.name for n in all_nodes(graph_from_path(model_path, lazy=True).model.graph)}
    return [n for n in names if n not in known]


# How many tensors and reader nodes a refusal names; past that, how many more.
_NAMED = 6
_EXCLUDE_LISTED = 200  # a list cut short cannot be used in one run


def _refuse_nonfinite_scales(path: Path, quant_format: str, model_path: Path) -> None:
    """quantize_static raises on a NaN range ("scale issue") but writes an infinite one as a scale of
    inf: the file loads and runs, every value through that tensor comes out NaN or 0, and the path
    would read "ok" at 0 dB. The same failure as a range ORT refuses, named in the file it wrote, with
    every tensor it concerns and the nodes of ``model_path`` (the file quantize_static read) that read
    them or write them: an inf spreads downstream, so excluding the first node alone only moves it on."""
    bad = nonfinite_scales(graph_from_path(path, lazy=True))
    if not bad:
        return
    # ORT names a weight's DequantizeLinear output '<weight>_DequantizeLinear_Output' (quant_utils.py).
    floats = list(dict.fromkeys(t.removesuffix("_DequantizeLinear_Output") for t, _ in bad))
    source = graph_from_path(model_path, lazy=True)
    # its producer quantizes a tensor's output as much as its readers do: both stay float
    readers = list(dict.fromkeys(n.name for t in floats for n in (source.producer.get(t), *source.consumers.get(t, []))
                                 if n is not None and n.name))
    fmt = "QDQ" if quant_format == "qdq" else "QOperator"
    named = ", ".join(repr(t) for t in floats[:_NAMED]) + (f" and {len(floats) - _NAMED} more" if len(floats) > _NAMED else "")
    exclude = (f" To keep them in float in one run: options.ort.nodes_to_exclude = "
               f"{readers[:_EXCLUDE_LISTED]}" + (f" and {len(readers) - _EXCLUDE_LISTED} more nodes"
                                                 if len(readers) > _EXCLUDE_LISTED else "") + "." if readers else "")
    raise NonFiniteCalibration(
        f"ORT's quantizer ({fmt} format) wrote a scale of inf or NaN for {len(floats)} tensor(s): {named}. Their "
        "calibration ranges hold inf or NaN on the calibration samples (an attention mask filled with -inf, or a "
        "weight that stores it, and what is computed from it), and no scale fits such a range; every value "
        f"through them would dequantize to NaN or 0.{exclude}",
        hint=NONFINITE_HINT)


def _ort_loads(path: Path, quant_format: str) -> None:
    """The path is ok only when ORT loads the file its own quantizer wrote (ort_fixups.py names the
    quantizer defects found so far; this catches the next one, with ORT's words naming the node)."""
    e = ort_refusal(path)
    if e is None:
        return
    fmt = "QDQ" if quant_format == "qdq" else "QOperator"
    raise OrtFileRejected(
        f"ORT cannot load the file quantize_static ({fmt}) wrote: {first_line(e)[:500]}",
        hint="the quantizer wrote this node wrong for this graph (a defect of onnxruntime.quantization); "
             "options.ort.nodes_to_exclude can keep the node ORT names in float; the other paths are unaffected",
    ) from e
