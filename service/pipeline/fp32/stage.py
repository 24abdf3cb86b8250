"""The fp32 stage: the reference file (the upload, or exported from torch), read once for its metadata,
bounded at the job's shapes and checked to run before any path quantizes it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import onnx

from service.pipeline.context import StageContext
from service.pipeline.files import OnnxFile
from service.pipeline.fp32.reference import fp32_onnx_from_source
from service.pipeline.fp32.runs import refuse_if_fp32_cannot_run
from service.pipeline.inputs.output_shapes import AfterSelection, output_positions, tensors_after_selection
from service.pipeline.inputs.safety.activations import check_activation_bytes, inferred_at_job_shapes
from service.pipeline.inputs.stage import Prepared
from service.pipeline.vocabulary import all_nodes, op_key
from service.schemas.options import ComparisonOptions


@dataclass(frozen=True)
class Fp32:
    file: OnnxFile  # the model as read for its metadata (external data not loaded)
    histogram: dict[str, int]  # op_key -> count, subgraphs included
    # The tensors after a selection (NonMaxSuppression, ...): those whose shape moves are compared by
    # shape only, in the levels and in the per-tensor table.
    after_selection: AfterSelection = field(default_factory=AfterSelection)

    def data_dependent_outputs(self) -> dict[int, str]:
        """Graph output position -> why, for the outputs whose shape depends on the values."""
        return output_positions(self.file.model, self.after_selection.moving)

    def padded_selection(self) -> dict[str, str]:
        """Graph outputs after a selection whose shape is fixed (rows padded to a maximum) -> why."""
        return {o.name: self.after_selection.fixed[o.name] for o in self.file.model.graph.output
                if o.name in self.after_selection.fixed}


def fp32_stage(options: ComparisonOptions, prepared: Prepared, ctx: StageContext) -> Fp32:
    """The fp32 reference file (the upload, or exported from torch), read once for its metadata; its
    tensors at the job's shapes bounded before any session runs it."""
    source = prepared.source
    path = fp32_onnx_from_source(source, ctx.folders.artifacts / "fp32.onnx")
    model = source.onnx_model if source.onnx_model is not None else onnx.load(str(path), load_external_data=False)
    inferred = inferred_at_job_shapes(model, prepared.shapes)
    check_activation_bytes(inferred, ctx.request.limits.budgets)
    refuse_if_fp32_cannot_run(path, inferred, prepared.samples, prepared.shapes, source.specs,
                              options, model=model, budgets=ctx.request.limits.budgets)
    return Fp32(file=OnnxFile(path, model), histogram=dict(Counter(op_key(n) for n in all_nodes(model.graph))),
                after_selection=tensors_after_selection(model, inferred))
