"""The per-tensor stage: each quantized file's tensors against fp32, aligned by name and position."""
