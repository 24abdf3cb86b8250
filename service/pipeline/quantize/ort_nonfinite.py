"""NaN or inf that the graph builds from its own constants, met by ORT's calibration on every sample.

A graph network fills with ``ConstantOfShape(value=NaN)`` of a computed shape and selects with
``Where``: the fill is NaN on every sample, so no other sample avoids it, and ``nodes_to_exclude``
on the Where does not help either. In ORT 1.32 (onnxruntime/quantization):

- ``quantize.py`` ``quantize_static`` hands ``create_calibrator`` the op_types_to_quantize list and
  nothing of nodes_to_exclude; ``calibrate.py`` ``CalibraterBase.select_tensors_to_calibrate``
  then measures every float input and output (initializers aside) of each node whose op type is
  listed, excluded or not;
- ``qdq_quantizer.py`` ``calc_graph_quant_params`` and ``onnx_quantizer.py``
  ``calculate_quantization_params`` compute a scale for every tensor the calibrator measured,
  quantized or not, and ``quant_utils.py`` ``compute_scale_zp`` asserts "scale issue" on a NaN range
  (an inf range becomes a scale of inf: ``ort_quant._refuse_nonfinite_scales``).

So the tensor must not be measured at all: each node that reads or writes it must be of an op type
left out of op_types_to_quantize. When every tensor ORT measured as NaN or inf is built without any
sample (``inputs.stored_nonfinite.made_without_samples``), the path is quantized again that way,
and says so; a test pins both the failure of nodes_to_exclude and the success of the op types.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from service.errors import NonFiniteCalibration
from service.pipeline.inputs.stored_nonfinite import made_without_samples
from service.pipeline.quantize.ort_calibration import tensors_without_finite_range
from service.pipeline.vocabulary import COMPUTE_OPS, is_onnx_domain, node_reads

_SHOWN = 3  # tensors named in a message


@dataclass(frozen=True)
class ConstantNonfinite:
    """Every tensor ORT's calibration found NaN or inf, each built from constants and shapes alone."""

    tensors: dict[str, list[str]]  # tensor -> the nodes that build it ("<op> '<name>'", graph order)
    left_out: list[str]  # op types whose nodes read or write them and that op_types_to_quantize lists
    remaining: list[str]  # op_types_to_quantize without them

    @property
    def retry(self) -> bool:
        """Quantized again without ``left_out``, unless that leaves a compute op (Conv, MatMul, ...) in float
        everywhere: then the figures would not describe int8 inference of the model, and the user decides."""
        return bool(self.left_out) and not any(t in COMPUTE_OPS for t in self.left_out)

    def what(self) -> str:
        shown = [f"{t!r} ({' -> '.join(chain[-4:]) or 'a constant'})" for t, chain in list(self.tensors.items())[:_SHOWN]]
        more = f" and {len(self.tensors) - _SHOWN} more" if len(self.tensors) > _SHOWN else ""
        return (f"ORT's calibration ranges of {len(self.tensors)} tensor(s) hold NaN or inf, and no sample decides "
                f"them: the graph builds {', '.join(shown)}{more} from its constants and the shapes of its tensors "
                "alone, so every sample gives the same NaN or inf")

    def note(self) -> str:
        return (f"{self.what()}. ORT's calibrator measures every input and output of each node whose op type "
                f"op_types_to_quantize lists, options.ort.nodes_to_exclude or not, and computes a scale for each "
                f"(quantize.py create_calibrator, calibrate.py select_tensors_to_calibrate, calc_graph_quant_params): "
                f"quantized again with op_types_to_quantize without {', '.join(self.left_out)}, whose nodes read "
                "or write them; those nodes run in float")

    def hint(self) -> str:
        return (f"leave {', '.join(self.left_out)} out of options.ort.op_types_to_quantize (e.g. {self.remaining}): "
                "ORT's calibrator measures every input and output of a listed op type, options.ort.nodes_to_exclude "
                "or not, and no scale fits NaN or inf; or export the model with a finite fill value")

    def error(self, original: NonFiniteCalibration, quant_format: str, *, retried: bool) -> NonFiniteCalibration:
        fmt = "QDQ" if quant_format == "qdq" else "QOperator"
        if retried:
            tail = (f" Quantized again with op_types_to_quantize without {', '.join(self.left_out)}, it failed "
                    f"again: {original.message}")
        elif self.left_out:
            tail = (f" Not quantized again without {', '.join(self.left_out)}: that would leave every "
                    f"{'/'.join(t for t in self.left_out if t in COMPUTE_OPS)} of the model in float.")
        else:
            tail = ""
        return NonFiniteCalibration(f"ORT's quantizer ({fmt} format) failed: {self.what()}.{tail}",
                                    hint=self.hint() if self.left_out else
                                    "export the model with a finite fill value (no sample avoids this one)")


def constant_nonfinite(model_path: Path, cache_path: Path | None, op_types: list[str]) -> ConstantNonfinite | None:
    """What ORT's calibration cache at ``cache_path`` says about ``model_path`` (the file quantize_static
    read) when every tensor with a NaN or inf range is built without samples; None when there is none,
    or when the samples reach one of them (then the samples are the thing to change)."""
    import onnx

    if cache_path is None or not cache_path.is_file():
        return None
    bad = tensors_without_finite_range(cache_path, model_path)
    if not bad:
        return None
    model = onnx.load(str(model_path), load_external_data=False)
    tensors: dict[str, list[str]] = {}
    for tensor, _, _ in bad:
        chain = made_without_samples(model, tensor)
        if chain is None:
            return None
        tensors[tensor] = chain
    touching = {n.op_type for n in model.graph.node if is_onnx_domain(n.domain)
                and (set(n.output) & set(tensors) or node_reads(n) & set(tensors))}
    left_out = sorted(t for t in touching if t in op_types)
    return ConstantNonfinite(tensors=tensors, left_out=left_out,
                             remaining=sorted(t for t in op_types if t not in left_out))


def retry_cache(cache_path: Path | None, left_out: list[str]) -> Path | None:
    """The calibration cache of the retry: the first one holds the NaN ranges, and both ORT formats
    retry with the same op types, so the second reads what the first wrote."""
    if cache_path is None:
        return None
    return cache_path.with_name(f"{cache_path.stem}.without_{'_'.join(left_out)}{cache_path.suffix}")
