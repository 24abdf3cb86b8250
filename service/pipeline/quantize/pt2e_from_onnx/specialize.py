"""Specialization: a copy of the upload made static for torch.export.

Steps (each says what it did in a note; the upload itself, the fp32 artifact and the ORT paths
are never touched):
1. initializers repeated in the input list are dropped (old exporters);
2. integer/bool inputs that hold one value in every calibration sample (a sample rate, a flag)
   become initializers, so the ``If``/``Shape`` arithmetic on them folds;
3. every input gets its resolved, concrete shape;
4. onnxscript's optimizer folds constants (``If`` on a constant, ``Shape`` of a static tensor);
5. every Conv reads its own weight and bias initializer (``own_weights.py``: torchao quantizes only
   the first of several convs that share one); after folding, which can make a weight an initializer;
6. ONNX shape inference runs on the result (for the report and for converters' ctx.shape).
What is still shape arithmetic after this is folded by ``module.build_module``'s eager run, which
knows every tensor's concrete shape.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from service.pipeline.quantize.float32_copy import widen_half_to_float32
from service.pipeline.quantize.onnx_cleanup import _bake_inputs, _drop_initializer_inputs, _fix_input_shapes, _fold_constants

from service.pipeline.quantize.pt2e_from_onnx.names import restore_io_names
from service.pipeline.quantize.pt2e_from_onnx.own_weights import own_weight_copies

log = logging.getLogger(__name__)


@dataclass
class Specialized:
    model: object  # onnx.ModelProto
    notes: list[str] = field(default_factory=list)
    baked: dict[str, np.ndarray] = field(default_factory=dict)


def specialized(model, shapes: dict[str, tuple[int, ...]], *,
                constants: dict[str, np.ndarray] | None = None, fold: bool = True) -> Specialized:
    import onnx

    work = onnx.ModelProto()
    work.CopyFrom(model)
    notes: list[str] = []
    _drop_initializer_inputs(work, notes)
    widen_half_to_float32(work, notes)
    baked_names = _bake_inputs(work, constants or {}, notes)
    _fix_input_shapes(work, shapes, notes, {})
    if fold:
        inputs, outputs = [i.name for i in work.graph.input], [o.name for o in work.graph.output]
        work = _fold_constants(work, notes)
        # onnxscript's IR renames an input that is also a graph output ("x" -> "x_orig"); the module
        # is built and fed by the upload's input names.
        restore_io_names(work, inputs, outputs)
    own_weight_copies(work, notes)
    try:
        work = onnx.shape_inference.infer_shapes(work, data_prop=True)
    except Exception as e:  # noqa: BLE001 - the eager build run knows the shapes anyway
        log.info("shape inference on the specialized model failed: %r", e)
    return Specialized(model=work, notes=notes, baked={n: np.asarray(constants[n]) for n in baked_names})
