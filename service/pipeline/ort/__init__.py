"""ONNX Runtime sessions shared by every stage: options, aborts, logs."""
