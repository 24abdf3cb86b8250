"""A torch.export program from an ONNX upload (via onnx2torch), so the PT2E path can run on it.

When conversion is impossible the PT2E path is *skipped* (not failed): the model is fine, this
route to PT2E just does not exist for it, and the message names what blocks it.
"""

from __future__ import annotations

import logging

from service.errors import PathSkipped
from service.pipeline.sources import ModelSource, dynamic_shapes_for, example_args

log = logging.getLogger(__name__)


def program_from_onnx(source: ModelSource, shapes: dict[str, tuple[int, ...]]):
    import onnx
    import torch
    from torch.export import export

    try:
        from onnx2torch import convert
    except ImportError as e:  # pragma: no cover - installed with the service
        raise PathSkipped("onnx2torch is not installed", stage="convert") from e

    model = onnx.load(str(source.onnx_path), load_external_data=True)
    # onnx2torch treats every graph input as a user input; old exporters list initializers there too.
    inits = {i.name for i in model.graph.initializer}
    if any(i.name in inits for i in model.graph.input):
        kept = [i for i in model.graph.input if i.name not in inits]
        del model.graph.input[:]
        model.graph.input.extend(kept)
    try:
        module = convert(model)
    except Exception as e:  # noqa: BLE001
        raise PathSkipped(
            f"onnx2torch cannot convert this model: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
            stage="convert",
            hint="upload the PyTorch model as a torch.export .pt2 to run the PT2E path; the ORT paths are unaffected",
        ) from e
    args = example_args(source.specs, shapes)
    try:
        with torch.no_grad():
            return export(module.eval(), args, dynamic_shapes=dynamic_shapes_for(source.specs))
    except Exception as first:  # noqa: BLE001 - retry with every dim fixed
        log.info("dynamic export of the converted module failed (%s); retrying with static shapes", first)
        static = tuple(torch.zeros(shapes[s.name], dtype=a.dtype) if a.dtype.is_floating_point is False else
                       torch.randn(shapes[s.name], dtype=a.dtype) for s, a in zip(source.specs, args))
        try:
            with torch.no_grad():
                return export(module.eval(), static)
        except Exception as e:  # noqa: BLE001
            raise PathSkipped(
                f"torch.export cannot trace the onnx2torch module: {type(e).__name__}: "
                f"{str(e).splitlines()[0][:300] if str(e) else ''}",
                stage="convert",
                hint="upload the PyTorch model as a torch.export .pt2 to run the PT2E path",
            ) from e
