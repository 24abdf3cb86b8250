"""PT2E of a small ONNX upload the way a job runs it: the source, the resolved shapes, generated
samples, ``qdq_from_pt2e``. A plain module imported by the tests that need it."""
from __future__ import annotations

from pathlib import Path


def pt2e_of_upload(upload: Path, out_path: Path, *, calibration_samples: int = 4, eval_samples: int = 2, **pt2e_kwargs):
    """(ToolInfo, Samples) of the PT2E path on ``upload``, its file written to ``out_path``; raises as the path does."""
    from service.pipeline.inputs.samples import generated_samples
    from service.pipeline.inputs.sources import source_from_onnx
    from service.pipeline.inputs.specs import resolved_input_shapes
    from service.schemas.options import ComparisonOptions
    from service.pipeline.quantize.pt2e import Pt2eInput, qdq_from_pt2e

    source = source_from_onnx(upload, name="m")
    options = ComparisonOptions.model_validate({"calibration_samples": calibration_samples, "eval_samples": eval_samples})
    shapes, _ = resolved_input_shapes(source.specs, options.input_shapes)
    samples = generated_samples(source.specs, shapes, options)
    tool = qdq_from_pt2e(Pt2eInput(source, shapes, samples.calibration, evaluation=samples.evaluation, **pt2e_kwargs),
                         out_path)
    return tool, samples
