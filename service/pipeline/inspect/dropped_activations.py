"""What ORT's QOperator quantizer dropped from the file: an activation whose input another node reads.

Read from the file as written (the inspect stage), where the quantized graph is at hand, against the file
quantize_static read (``Quantized.ort_input``: pre-processed, its nodes are those ORT's quantizer saw)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from service.pipeline.vocabulary import ACTIVATIONS_ABSORBED_BY_Q, is_onnx_domain, node_reads


@dataclass(frozen=True)
class DroppedActivation:
    op_type: str  # Relu or Clip
    name: str  # the node's name, or its output's where it has none
    input: str  # the tensor another node reads too


def dropped_activations(read_model, qoperator_model) -> list[DroppedActivation]:
    """The Relu/Clip nodes ORT's QOperator file lost although another node also reads their input (the decide
    stage's lint ``qoperator_dropped_activation`` says what that does to the figures).

    ``QLinearActivation.QuantizeClipRelu`` (onnxruntime/quantization/operators/activation.py) drops every Relu or
    Clip whose input is quantized (activations not symmetric) and hands its output the input's quantized value,
    trusting the input's range to start at the activation's; ``adjust_tensor_ranges`` (base_quantizer.py) narrows
    that range only when the Relu or Clip is its input's only reader. With a second reader the file carries the
    input's full range where the activation's output was, negatives included. Found in the file itself, by the
    activations of ``read_model`` (the file quantize_static read) that the QOperator file no longer runs:
    - a float reader gets the output as ``DequantizeLinear`` of the input (MatMul -> {Relu, Sigmoid}: -0.6 dB);
    - a quantized reader reads the input's quantized tensor, and the output's name is gone from the file (a
      tf2onnx PReLU, ``Relu(h) + alpha * Relu(Neg(h))``: QLinearAdd reads ``h_quantized``, -1.7 dB).
    Not where the input's quantized range starts at 0 anyway (its zero point is the type's lowest value).
    """
    if qoperator_model is None or read_model is None:
        return []
    read = read_model.graph
    readers = Counter(i for n in read.node for i in node_reads(n))
    graph_outputs = {o.name for o in read.output}
    qop = qoperator_model.graph
    written_by = {o: n for n in qop.node for o in n.output if o}
    present = written_by.keys() | {i.name for i in qop.input} | {t.name for t in qop.initializer}

    def dropped(n) -> bool:
        out = n.output[0]
        return (out not in present or getattr(written_by.get(out), "op_type", None) == "DequantizeLinear") \
            and not _starts_at_lowest(qop, n.input[0])

    lost = [n for n in read.node
            if n.op_type in ACTIVATIONS_ABSORBED_BY_Q and is_onnx_domain(n.domain) and n.input and n.output
            and readers[n.input[0]] + (n.input[0] in graph_outputs) > 1 and dropped(n)]
    return [DroppedActivation(op_type=n.op_type, name=n.name or n.output[0], input=n.input[0]) for n in lost]


def _starts_at_lowest(graph, tensor: str) -> bool:
    """The quantized value ORT wrote for ``tensor`` (``<tensor>_zero_point``, quant_utils.py's naming) has the
    lowest value of its type as zero point: its range starts at 0, so nothing a Relu removes is in it."""
    from onnx import numpy_helper

    zp = next((t for t in graph.initializer if t.name == f"{tensor}_zero_point"), None)
    if zp is None:
        return False
    value = numpy_helper.to_array(zp)
    return value.size == 1 and value.dtype.kind in "iu" and int(value.reshape(-1)[0]) == np.iinfo(value.dtype).min
