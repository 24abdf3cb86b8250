"""PT2E path: torch.export -> prepare_pt2e(XNNPACKQuantizer) -> calibrate -> convert_pt2e -> QDQ ONNX."""

from __future__ import annotations

from pathlib import Path

from service.pipeline.samples import Feed
from service.pipeline.sources import ModelSource, dynamic_shapes_for, example_args
from service.schemas.report import ToolInfo


def program_for_pt2e(source: ModelSource, shapes: dict[str, tuple[int, ...]], calibration=None):
    """The torch.export program PT2E starts from; for ONNX uploads, via onnx2torch."""
    if source.program is not None:
        return source.program
    from service.pipeline.onnx_to_torch import program_from_onnx

    return program_from_onnx(source, shapes, calibration=calibration)


def qdq_from_pt2e(
    source: ModelSource,
    shapes: dict[str, tuple[int, ...]],
    calibration: list[Feed],
    out_path: Path,
    *,
    per_channel: bool = True,
) -> ToolInfo:
    import onnx
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    program = program_for_pt2e(source, shapes, calibration)
    specs = source.specs
    config = get_symmetric_quantization_config(is_per_channel=per_channel)
    quantizer = XNNPACKQuantizer().set_global(config)
    prepared = prepare_pt2e(program.module(), quantizer)
    names = [s.name for s in specs]
    with torch.no_grad():
        for feed in calibration:
            prepared(*[torch.from_numpy(feed[n]) for n in names])
    converted = convert_pt2e(prepared)
    # torch.onnx.export re-exports the converted module, so the dynamic batch is stated again.
    with torch.no_grad():
        onnx_program = torch.onnx.export(
            converted, example_args(specs, shapes), dynamo=True, verbose=False,
            dynamic_shapes=dynamic_shapes_for(specs),
        )
    onnx.save(onnx_program.model_proto, out_path)
    act = config.input_activation
    weight = config.weight
    from importlib.metadata import version

    return ToolInfo(
        name="torchao PT2E (XNNPACKQuantizer) + torch.onnx.export(dynamo=True)",
        version=f"torch {version('torch')}, torchao {version('torchao')}",
        settings={
            "quantizer": "torchao.testing.pt2e._xnnpack_quantizer.XNNPACKQuantizer",
            "config": "get_symmetric_quantization_config",
            "per_channel": per_channel,
            "activation": f"{act.dtype} [{act.quant_min}, {act.quant_max}] {act.qscheme}",
            "weight": f"{weight.dtype} [{weight.quant_min}, {weight.quant_max}] {weight.qscheme}",
            "calibration_samples": len(calibration),
        },
        calibration=f"{_observer_name(act)} (activations), {_observer_name(weight)} (weights)",
    )


def _observer_name(spec) -> str:
    # torchao wraps the observer class in PartialWrapper(functools.partial(cls, ...)).
    ctr = spec.observer_or_fake_quant_ctr
    func = getattr(getattr(ctr, "p", ctr), "func", ctr)
    return getattr(func, "__name__", repr(func))
