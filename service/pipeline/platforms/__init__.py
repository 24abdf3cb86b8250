"""Other platforms than the machine that runs the job: arm64 as ONNX Runtime emulated under qemu-user."""
