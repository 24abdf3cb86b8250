"""What ORT's QOperator quantizer dropped from the file: an activation whose input another node reads.

Read from the file as written (the inspect stage), where the quantized graph is at hand."""

from __future__ import annotations

from collections import Counter

from service.schemas.levels import Lint
from service.pipeline.vocabulary import ACTIVATIONS_ABSORBED_BY_Q


def qoperator_dropped_relu_lints(fp32_model, qoperator_model) -> list[Lint]:
    """One lint when ORT's QOperator file lost a Relu/Clip whose input another node also reads.

    ``QLinearActivation.QuantizeClipRelu`` (onnxruntime/quantization/operators/activation.py) drops every Relu or
    Clip after a quantized op and hands its output the input's quantized value, trusting the input's range to
    start at the activation's; ``adjust_tensor_ranges`` (base_quantizer.py) narrows that range only when the
    Relu or Clip is its input's only reader. With a second reader the file writes the activation's output as
    ``DequantizeLinear`` of the input, negatives included (MatMul -> {Relu, Sigmoid}: the Relu's output -0.6 dB).
    Found in the file itself: the fp32 activation's output tensor is written there by a DequantizeLinear.
    """
    if qoperator_model is None:
        return []
    fp32 = fp32_model.graph
    readers = Counter(i for n in fp32.node for i in n.input if i)
    graph_outputs = {o.name for o in fp32.output}
    written_by = {o: n for n in qoperator_model.graph.node for o in n.output if o}
    lost = [n for n in fp32.node
            if n.op_type in ACTIVATIONS_ABSORBED_BY_Q and (n.domain or "") in ("", "ai.onnx") and n.input and n.output
            and readers[n.input[0]] + (n.input[0] in graph_outputs) > 1
            and getattr(written_by.get(n.output[0]), "op_type", None) == "DequantizeLinear"]
    if not lost:
        return []
    names = [n.name or n.output[0] for n in lost]
    shown = ", ".join(f"{n.op_type} '{n.name or n.output[0]}' (input '{n.input[0]}')" for n in lost[:3])
    more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
    return [Lint(
        code="qoperator_dropped_activation", severity="error", artifact="ort_qoperator",
        message=(f"ORT's QOperator quantizer removed {shown}{more} although another node also reads that input: it "
                 "kept the input's full range, so the file writes the activation's output as the dequantized input, "
                 "negatives included, and its figures downstream measure that, not int8 rounding"),
        hint=(f"keep them in float with options.ort.nodes_to_exclude = {names[:8]}, or deploy the QDQ file "
              "(ort_qdq keeps the activation)"),
        source="onnxruntime/quantization/operators/activation.py (QLinearActivation.QuantizeClipRelu), "
               "base_quantizer.py (adjust_tensor_ranges: only for a Relu/Clip that is its input's only reader)",
    )]
