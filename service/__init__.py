"""quantcompare: one fp32 model, quantized by PT2E and by ONNX Runtime, and what ORT makes of each file."""

__version__ = "0.1.0"
