"""The prepare stage: the model loaded and checked, its input shapes and the samples every path
shares; and ``checked_input_shapes``, the one pre-check of an upload's
inputs that the API's early answer and the prepare stage both run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from service.errors import InvalidOptions
from service.pipeline.context import StageContext
from service.pipeline.inputs import sources
from service.pipeline.inputs.data_shapes import array_shapes_in_npz
from service.pipeline.inputs.model_ranges import input_ranges_from_onnx
from service.pipeline.inputs.safety import check_input_elements, check_sample_bytes, sniff_model_format
from service.pipeline.inputs.samples import Samples, check_calibration_keys, generated_samples, samples_from_npz
from service.pipeline.inputs.sources import ModelSource
from service.pipeline.inputs.specs import InputSpec, resolved_input_shapes
from service.schemas.options import ComparisonOptions


@dataclass(frozen=True)
class Prepared:
    source: ModelSource
    shapes: dict[str, tuple[int, ...]]
    shape_notes: list[str]
    samples: Samples


def checked_input_shapes(specs: list[InputSpec], options: ComparisonOptions, calibration_path: Path | None,
                         budgets=None, *, batch_dims: dict[str, int] | None = None
                         ) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """The input shapes a job runs at, once every check that needs no sample has passed: the .npz's
    keys (its directory only), the dims the options and the .npz's array headers give, each input's
    element budget, and, for generated samples, the bytes of all of them (an uploaded .npz is bounded
    by its upload limit). The API runs it for its early answer; the prepare stage runs it first."""
    data_shapes = None
    if calibration_path is not None:  # headers only: cheap for any size, and dims may come from them
        data_shapes = array_shapes_in_npz(calibration_path)
        with np.load(calibration_path, allow_pickle=False) as npz:  # a stray key is refused before any read
            check_calibration_keys(npz.files, specs)
    shapes, notes = resolved_input_shapes(specs, options.input_shapes, data_shapes=data_shapes, batch_dims=batch_dims)
    # Security: the declared-size check on the shapes samples are actually made with (dynamic dims
    # filled in from input_shapes), before any array is allocated (Budgets.max_input_elements).
    for name, shape in shapes.items():
        check_input_elements(name, shape, budgets)
    if calibration_path is None:
        check_sample_bytes(shapes, {s.name: s.dtype for s in specs},
                           options.calibration_samples + options.eval_samples, budgets)
    return shapes, notes


def model_source(ctx: StageContext) -> ModelSource:
    """The uploaded model (or example) read and checked: an archive, a .pt2 or an ONNX file."""
    if (ctx.request.example is None) == (ctx.request.model_path is None):
        raise InvalidOptions("give either a model file or an example name, not both or neither",
                             hint="upload a model, or send {\"example\": \"conv_relu\"}")
    if ctx.request.example is not None:
        return sources.source_from_example(ctx.request.example)
    name = ctx.request.model_name or "model"
    if sources.is_model_archive(ctx.request.model_path):
        return sources.source_from_archive(ctx.request.model_path, ctx.folders.workdir / "model", name=name, budgets=ctx.request.limits.budgets)
    # Sniffing refuses a .pt2 before any of its bytes are interpreted when .pt2 uploads are off.
    if sniff_model_format(ctx.request.model_path, allow_pt2=ctx.request.limits.allow_pt2) == "pt2":
        return sources.source_from_pt2(ctx.request.model_path, name=name, budgets=ctx.request.limits.budgets, allow_pt2=ctx.request.limits.allow_pt2)
    if ctx.request.data_beside_model:
        return sources.source_from_onnx_with_local_data(ctx.request.model_path, name=name, budgets=ctx.request.limits.budgets)
    return sources.source_from_onnx(ctx.request.model_path, name=name, budgets=ctx.request.limits.budgets)


def prepare_stage(options: ComparisonOptions, ctx: StageContext) -> Prepared:
    """Load and check the model, resolve the input shapes, make the samples every path shares."""
    source = model_source(ctx)
    shapes, shape_notes = checked_input_shapes(source.specs, options, ctx.request.calibration_path, ctx.request.limits.budgets,
                                               batch_dims=source.batch_dims)
    if ctx.request.calibration_path is not None:
        samples = samples_from_npz(ctx.request.calibration_path, source.specs, shapes, options)
    else:  # where the graph states an input's range (ids into a table, a normalization), draw in it
        ranges = input_ranges_from_onnx(source.onnx_model, source.specs) if source.onnx_model is not None else {}
        samples = generated_samples(source.specs, shapes, options, model_ranges=ranges)
    return Prepared(source=source, shapes=shapes, shape_notes=shape_notes, samples=samples)
