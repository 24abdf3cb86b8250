"""A torch.export program from an ONNX upload (via onnx2torch), so the PT2E path can run on it.

Before converting, a copy of the model is cleaned (``onnx_cleanup``): initializers dropped from
the input list, inputs fixed to the job's resolved shapes, integer inputs that hold one value in
every calibration sample folded in, constants folded (which removes ``If`` on such an input and
the ``Shape`` arithmetic of static dims). What still cannot be converted is named: the ops
onnx2torch has no converter for, or the construct torch.export refuses.

When conversion is impossible the PT2E path is *skipped* (not failed): the model is fine, this
route to PT2E just does not exist for it, and the message names what blocks it.
"""

from __future__ import annotations

import logging
import sys
import types
from collections import Counter

import numpy as np

from service.errors import PathSkipped
from service.pipeline.inputs.sources import ModelSource, dynamic_shapes_for, example_args
from service.pipeline.quantize.isolation import first_line

log = logging.getLogger(__name__)

_PT2_HINT = "upload the PyTorch model as a torch.export .pt2 to run the PT2E path; the ORT paths are unaffected"


def _import_onnx2torch():
    """``onnx2torch.convert``; survives a torchvision whose C ops do not load beside this torch.

    onnx2torch imports torchvision for two converters only (NonMaxSuppression, RoiAlign). PyPI's
    torchvision wheel is a CUDA build and fails to import beside the CPU torch the service pins
    ("operator torchvision::nms does not exist"); a stand-in module keeps every other converter.
    """
    try:
        from onnx2torch import convert

        _extend_registry()
        return convert
    except ImportError:
        raise
    except Exception as first:  # noqa: BLE001 - RuntimeError from torchvision's op registration
        log.info("onnx2torch import failed (%r); retrying without torchvision's C ops", first)
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith(("torchvision.", "onnx2torch"))]:
            del sys.modules[name]
        sys.modules.update(_torchvision_stand_in())
        from onnx2torch import convert

        _extend_registry()
        return convert


# Ops whose opset 19/21 versions only widened the type list: the older converter is exact.
_TYPES_ONLY_BUMPS = ("Cast", "Constant", "Identity", "Shape", "Size", "Flatten", "Squeeze", "Unsqueeze",
                     "Transpose", "ConstantOfShape", "Equal", "Reshape")
_NEWEST_OPSET = 23


def _extend_registry() -> None:
    """Make onnx2torch's converters usable by torch.export and by newer opsets (idempotent).

    - Reshape: onnx2torch's module runs ``torch.any(shape == 0)`` on the shape tensor, a
      data-dependent branch torch.export cannot trace; when the shape is a constant (the usual
      case once constants are folded) the replacement bakes it in as Python ints.
    - Ops whose newer versions only add types get the newest existing converter for those versions.
    """
    from onnx2torch.node_converters import registry

    reg = registry._CONVERTER_REGISTRY
    if getattr(registry, "_quantcompare_extended", False):
        return
    Desc = registry.OperationDescription
    for v in (5, 13, 14):
        reg[Desc("", "Reshape", v)] = _reshape_converter
    for op in _TYPES_ONLY_BUMPS:
        have = sorted(d.version for d in reg if d.domain == "" and d.operation_type == op)
        if not have:
            continue
        for v in range(have[-1] + 1, _NEWEST_OPSET + 1):
            reg.setdefault(Desc("", op, v), reg[Desc("", op, have[-1])])
    registry._quantcompare_extended = True


def _reshape_converter(node, graph):
    import torch
    from onnx2torch.node_converters.reshape import OnnxReshape
    from onnx2torch.utils.common import OnnxMapping, OperationConverterResult, get_const_value, onnx_mapping_from_node

    allowzero = node.attributes.get("allowzero", 0) == 1
    try:
        shape = [int(d) for d in get_const_value(node.input_values[1], graph).tolist()]
    except (KeyError, AttributeError):
        if allowzero:
            raise NotImplementedError('Reshape with allowzero=1 and a computed shape') from None
        return OperationConverterResult(torch_module=OnnxReshape(), onnx_mapping=onnx_mapping_from_node(node=node))
    if allowzero and 0 in shape:
        raise NotImplementedError('Reshape with allowzero=1 to a shape with a 0 dim')
    # allowzero only changes what a 0 in the shape means; without one, both readings agree.

    class ConstantReshape(torch.nn.Module):
        def forward(self, x):
            return torch.reshape(x, [x.shape[i] if d == 0 else d for i, d in enumerate(shape)])

    return OperationConverterResult(
        torch_module=ConstantReshape(),
        onnx_mapping=OnnxMapping(inputs=(node.input_values[0],), outputs=node.output_values),
    )


def _torchvision_stand_in() -> dict[str, types.ModuleType]:
    def unavailable(*_a, **_k):
        raise RuntimeError("torchvision's C ops (nms, roi_align) are not available beside this torch build")

    import importlib.machinery

    tv = types.ModuleType("torchvision")
    ops = types.ModuleType("torchvision.ops")
    tv.__spec__ = importlib.machinery.ModuleSpec("torchvision", None)  # torch.onnx probes find_spec()
    ops.__spec__ = importlib.machinery.ModuleSpec("torchvision.ops", None)
    ops.nms = ops.roi_align = ops.box_convert = unavailable
    tv.ops = ops
    tv.__quantcompare_stand_in__ = True
    return {"torchvision": tv, "torchvision.ops": ops}


def unconvertible_ops(model) -> Counter:
    """``domain.op_type`` (or ``op_type``) of main-graph nodes onnx2torch has no converter for."""
    from onnx2torch.node_converters.registry import get_converter

    opsets = {o.domain: o.version for o in model.opset_import}
    if "" not in opsets and "ai.onnx" in opsets:
        opsets[""] = opsets["ai.onnx"]
    missing: Counter = Counter()
    for node in model.graph.node:
        domain = node.domain if node.domain not in ("ai.onnx",) else ""
        key = node.op_type if domain == "" else f"{domain}.{node.op_type}"
        try:
            get_converter(operation_type=node.op_type, version=opsets.get(domain, 1), domain=domain)
        except NotImplementedError:
            missing[key] += 1
    return missing


def _blocker_message(missing: Counter, model) -> tuple[str, str]:
    from service.pipeline.quantize.onnx_cleanup import CONTROL_FLOW

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    listed = ", ".join(f"{op} x{n}" for op, n in missing.most_common())
    message = f"onnx2torch has no converter for {listed} (ai.onnx opset {opset})"
    cf = [op for op in missing if op in CONTROL_FLOW]
    if cf:
        hint = (f"{'/'.join(cf)} (control flow) cannot become a torch graph this way and did not fold away: if it "
                "branches on an integer input (e.g. a sample rate), give that input one value with "
                'options.input_values {"<input>": {"constant": <value>}} so it folds; otherwise ' + _PT2_HINT)
    else:
        hint = _PT2_HINT
    return message, hint


def program_from_onnx(source: ModelSource, shapes: dict[str, tuple[int, ...]], *,
                      calibration: list[dict[str, np.ndarray]] | None = None):
    """The torch.export program for ``source`` (an ONNX upload); PathSkipped names what blocks it.

    ``calibration``: the job's calibration feeds; integer/bool inputs that hold one value in all
    of them are folded in as constants (the returned program still takes every input).
    """
    import onnx
    import torch
    from torch.export import export

    from service.pipeline.quantize.already_quantized import skip_if_quantized
    from service.pipeline.quantize.onnx_cleanup import cleaned_for_torch, constant_inputs

    try:
        convert = _import_onnx2torch()
    except Exception as e:  # pragma: no cover - installed with the service
        raise PathSkipped(f"onnx2torch cannot be imported ({first_line(e)})", stage="convert",
                          hint=_PT2_HINT) from e

    model = onnx.load(str(source.onnx_path), load_external_data=True)
    skip_if_quantized(model)
    # Dim 0 stays symbolic where the spec has it symbolic: dynamic_shapes_for() exports it as `batch`.
    keep = {s.name: {0} for s in source.specs if s.shape and not isinstance(s.shape[0], int)}
    cleaned = cleaned_for_torch(model, shapes, constants=constant_inputs(calibration or []), keep_dynamic=keep)
    if any(missing_ops := unconvertible_ops(cleaned.model)) and keep:
        # Folding with a symbolic batch left ops behind: fold again with every dim fixed.
        again = cleaned_for_torch(model, shapes, constants=constant_inputs(calibration or []))
        if sum(unconvertible_ops(again.model).values()) < sum(missing_ops.values()):
            cleaned = again
    for note in cleaned.notes:
        log.info("onnx -> torch clean-up: %s", note)
    missing = unconvertible_ops(cleaned.model)
    if missing:
        message, hint = _blocker_message(missing, cleaned.model)
        raise PathSkipped(message, stage="convert", hint=hint)
    try:
        inner = convert(cleaned.model)
    except Exception as e:  # noqa: BLE001
        raise PathSkipped(f"onnx2torch cannot convert this model: {first_line(e)}", stage="convert",
                          hint=_PT2_HINT) from e
    module = _AllInputs(inner.eval(), [s.name for s in source.specs], set(cleaned.baked_inputs))
    args = example_args(source.specs, shapes)
    try:
        with torch.no_grad():
            return export(module, args, dynamic_shapes=dynamic_shapes_for(source.specs))
    except Exception as first:  # noqa: BLE001 - retry with every dim fixed
        log.info("dynamic export of the converted module failed (%s); retrying with static shapes", first)
        static = tuple(_static_arg(a, shapes[s.name], calibration, s.name) for s, a in zip(source.specs, args))
        try:
            with torch.no_grad():
                return export(module, static)
        except Exception as e:  # noqa: BLE001
            raise PathSkipped(
                f"torch.export cannot trace the module onnx2torch made: {first_line(e)}",
                stage="convert", hint=_PT2_HINT,
            ) from e


def _static_arg(like, shape, calibration, name):
    import torch

    if calibration:  # real values: integer inputs (token ids, a sample rate) stay in range
        return torch.from_numpy(np.ascontiguousarray(calibration[0][name]))
    if like.dtype.is_floating_point:
        return torch.randn(shape, dtype=like.dtype)
    return torch.zeros(shape, dtype=like.dtype)


def _AllInputs(inner, names: list[str], baked: set[str]):
    """Wrap the converted module so it takes every model input, in order, ignoring folded ones."""
    import inspect

    import torch

    keep = [i for i, n in enumerate(names) if n not in baked]

    class AllInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(*[args[i] for i in keep])

    # torch.export names the placeholders (and so the PT2E file's graph inputs) after forward's
    # parameters: keep the model's input names so evaluation feeds fit every artifact.
    if all(n.isidentifier() for n in names):
        params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
        AllInputs.forward.__signature__ = inspect.Signature(params)
    return AllInputs().eval()
