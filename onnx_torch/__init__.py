"""ONNX -> torch: a converter written for torch.export, so that PT2E can quantize an ONNX upload.

A library of its own: it imports onnx, numpy and torch, and nothing of the service (a tree rule pins it).
``module.build_module(model, ...)`` turns a specialized ONNX model into a ``torch.nn.Module`` whose forward
runs one converter per node (``registry.converter``; the op modules under ``ops/``, one per op family).
What ops it converts: docs/onnx_torch_ops.md. The service's glue (specialize the upload, check parity
against ONNX Runtime, torch.export, the PT2E file's names) is service/pipeline/quantize/pt2e_from_onnx/.
Importing this package imports no torch; its modules import torch at their top.
"""
