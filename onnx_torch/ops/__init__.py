"""Converters, one module per op family. Every module here is imported by registry._load_ops.

Ownership (issue 12):
- C2: rnn.py, control_flow.py, resize_pad.py, pool.py, conv.py
- C1: everything else (elementwise.py, activations.py, math.py (MatMul/Gemm/Einsum),
  normalization.py, shape.py (shape & data movement), reductions.py, indexing.py
  (Softmax/TopK/ArgMax/CumSum/Gather...), cast.py, constant.py, quant.py)
"""
