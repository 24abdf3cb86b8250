"""NVIDIA ModelOpt's modelopt.onnx.quantization.quantize in int8 on the CPU (no CUDA, cupy or TensorRT).

It patches onnxruntime.quantization process-wide: this process does nothing else."""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
from runner_io import calibration_feeds, read_request, unmatched_settings, write_result

NOT_MATCHED = [
    "activations are always symmetric (zero point 0; ModelOpt hard-codes ActivationSymmetric), ORT's matched are "
    "asymmetric",
    "TensorRT placement: a Conv with fewer than 16 input or output channels is left float (unless it is the first "
    "layer with channels divisible by 8), and no Q on Conv/ReLU outputs",
    "weights are stored float followed by QuantizeLinear -> DequantizeLinear, not as int8 initializers",
    "bias stays float (ORT writes an int32 bias)",
    "the file is upgraded to opset 19 / IR 10",
]


def main() -> None:
    from modelopt.onnx.quantization import quantize

    request = read_request()
    feeds = calibration_feeds(request)
    data = {name: np.concatenate([f[name] for f in feeds]) for name in request["input_names"]}
    settings = request["settings"]
    if request["preset"] == "matched":
        kwargs = dict(calibration_method="max", high_precision_dtype="fp32", enable_gemv_detection_for_trt=False)
        used = {"calibrate_method": "minmax", "activation_type": "int8", "weight_type": "int8", "per_channel": True,
                "reduce_range": False}
        not_matched = NOT_MATCHED + unmatched_settings(settings, used)
        calibration = "max (MinMax), symmetric"
    else:  # ModelOpt's own int8 defaults, the TensorRT flavour
        kwargs = {}
        used = {"calibration_method": "entropy", "high_precision_dtype": "fp16", "gemv_detection": True}
        not_matched = ["preset 'tensorrt' is ModelOpt's own: entropy calibration, the float graph cast to fp16, "
                       "Gemm/MatMul with M or N == 1 left float"] + NOT_MATCHED[:4]
        calibration = "entropy (ModelOpt's default), symmetric"
    quantize(request["model"], quantize_mode="int8", calibration_data=data, calibration_eps=["cpu"],
             output_path=request["out"], **kwargs)
    write_result(request, version=version("nvidia-modelopt"), settings=used, not_matched=not_matched,
                 calibration=calibration)


if __name__ == "__main__":
    main()
