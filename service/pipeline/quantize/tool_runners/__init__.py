"""Scripts run by quantize/tool_paths.py in a subprocess, each by its tool's interpreter (the project venv for
NNCF, a side venv for ModelOpt and Quark). They import nothing of ``service``: only the standard library,
numpy, onnx, the tool, and ``runner_io`` beside them."""
