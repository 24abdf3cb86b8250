"""NNCF's nncf.quantize on an ONNX model (its ONNX backend calibrates with onnxruntime; no openvino)."""

from __future__ import annotations

import os

os.environ.setdefault("CI", "true")  # openvino-telemetry sends nothing under CI (disable_in_ci)

import onnx  # noqa: E402
from runner_io import calibration_feeds, read_request, unmatched_settings, write_result  # noqa: E402

NOT_MATCHED = [
    "activations after a ReLU are uint8 zero point 0 (NNCF's hardware config; signedness_to_force fails), "
    "ORT's are int8",
    "placement follows NNCF's patterns: Conv+ReLU is one unit, no Q/DQ on Gemm/MatMul outputs nor the model output",
    "bias stays float (ORT writes an int32 bias)",
    "activation ranges are nudged so that zero is exactly representable (scales within about 0.4% of ORT's)",
]


def main() -> None:
    import nncf

    request = read_request()
    feeds = calibration_feeds(request)
    model = onnx.load(request["model"])
    dataset = nncf.Dataset(feeds, lambda feed: feed)
    settings = request["settings"]
    per_channel = bool(settings.get("per_channel", True))
    if request["preset"] == "matched":
        from nncf.common.quantization.structs import QuantizationScheme
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, QuantizationParameters
        from nncf.quantization.range_estimator import RangeEstimatorParametersSet

        adv = AdvancedQuantizationParameters(
            activations_quantization_params=QuantizationParameters(num_bits=8, mode=QuantizationScheme.ASYMMETRIC),
            weights_quantization_params=QuantizationParameters(num_bits=8, mode=QuantizationScheme.SYMMETRIC,
                                                               per_channel=per_channel),
            activations_range_estimator_params=RangeEstimatorParametersSet.MINMAX,
            weights_range_estimator_params=RangeEstimatorParametersSet.MINMAX,
            disable_bias_correction=True,  # FastBiasCorrection would change the float bias
            overflow_fix=nncf.OverflowFix.DISABLE,  # FIRST_LAYER halves the first conv's weight range (7 bits)
        )
        quantized = nncf.quantize(model, dataset, subset_size=len(feeds), preset=nncf.QuantizationPreset.MIXED,
                                  advanced_parameters=adv)
        used = {"calibrate_method": "minmax", "activation_type": "int8", "weight_type": "int8",
                "per_channel": per_channel, "reduce_range": False}
        not_matched = NOT_MATCHED + unmatched_settings(settings, used)
        calibration = "MinMax (global min/max over the samples), as ORT's"
    else:
        quantized = nncf.quantize(model, dataset, subset_size=len(feeds))
        used = {"preset": "PERFORMANCE (symmetric activations)", "bias_correction": "fast", "overflow_fix": "first_layer"}
        not_matched = ["preset 'default' is NNCF's own: symmetric activations, FastBiasCorrection, the first "
                       "layer's weights on 7 bits (overflow fix)"] + NOT_MATCHED[:3]
        calibration = "NNCF's default range estimators (min/max of activations, quantile-free)"
    onnx.save(quantized, request["out"])
    write_result(request, version=nncf.__version__, settings=used, not_matched=not_matched, calibration=calibration)


if __name__ == "__main__":
    main()
