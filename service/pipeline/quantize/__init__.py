"""Quantizers: PT2E, ORT quantize_static, and the ONNX -> torch converter PT2E needs."""
