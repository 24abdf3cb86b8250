"""ONNX -> torch conversion built for torch.export + PT2E (issue 12).

registry.py: the converter registry and the API converters code against.
ops/: one module per op family.
"""
