"""AMD Quark's quark.onnx ModelQuantizer (it wraps ORT's quantizer; its own presets are A8W8 and XINT8)."""

from __future__ import annotations

from importlib.metadata import version

from runner_io import calibration_feeds, read_request, unmatched_settings, write_result


def main() -> None:
    from onnxruntime.quantization import CalibrationDataReader
    from quark.onnx import A8W8_QCONFIG, XINT8_QCONFIG, ModelQuantizer, QConfig
    from quark.onnx.quantization.config.spec import CalibMethod, Int8Spec, QLayerConfig, QuantGranularity

    request = read_request()
    feeds = calibration_feeds(request)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    settings, preset = request["settings"], request["preset"]
    per_channel = bool(settings.get("per_channel", True))
    if preset == "matched":
        config = QConfig(global_config=QLayerConfig(
            activation=Int8Spec(symmetric=False, calibration_method=CalibMethod.MinMax),
            weight=Int8Spec(symmetric=True, calibration_method=CalibMethod.MinMax,
                            quant_granularity=QuantGranularity.Channel if per_channel else QuantGranularity.Tensor)))
        used = {"calibrate_method": "minmax", "activation_type": "int8", "weight_type": "int8",
                "per_channel": per_channel, "reduce_range": False}
        not_matched = unmatched_settings(settings, used)
        calibration = "MinMax, as ORT's (Quark wraps ORT's calibrator)"
    elif preset == "a8w8":
        config, calibration = A8W8_QCONFIG, "Percentile (Quark's A8W8)"
        used = {"activations": "int8 symmetric", "weights": "int8 symmetric per-tensor"}
        not_matched = ["preset 'a8w8' is Quark's own: symmetric activations (Percentile), per-tensor weights"]
    else:
        config, calibration = XINT8_QCONFIG, "MinMSE, power-of-two scales (Quark's XINT8)"
        used = {"activations": "int8 symmetric, power-of-two scales", "weights": "int8 per-tensor, power-of-two",
                "bias": "int8"}
        not_matched = ["preset 'xint8' is Quark's own, for NPUs: power-of-two scales, per-tensor weights, int8 bias, "
                       "Q/DQ on every tensor; the graph is rewritten (GlobalAveragePool split) and may fail "
                       "onnx.checker while ORT runs it"]
    ModelQuantizer(config).quantize_model(request["model"], request["out"], Reader())
    write_result(request, version=version("amd-quark"), settings=used, not_matched=not_matched,
                 calibration=calibration)


if __name__ == "__main__":
    main()
