"""Converters for ops newer exporters write (opset 16..26) and a few older ones uploads carry, against
ORT's CPU kernels (the oracle), eager and through torch.export: Attention and RMSNormalization
(opset 23, what torch.onnx.export writes for scaled_dot_product_attention and nn.RMSNorm at opset 23),
Swish (24), CumProd (26), RotaryEmbedding (23), Scatter (opset 9-10), GridSample (16, 20), EyeLike, ReverseSequence (TF bidirectional RNNs). Each failed before: the PT2E path of the upload was
skipped naming the op."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_parity import assert_matches_ort, make_model, rand

RNG = np.random.default_rng(0)


def _one(op, feeds, inits=None, *, opset, outputs=("Y",), inputs=None, out_types=None, **attrs):
    names = inputs if inputs is not None else [*feeds, *(inits or {})]
    node = helper.make_node(op, names, list(outputs), name="n0", **attrs)
    return make_model(node, feeds, list(outputs), initializers=inits, opset=opset, output_types=out_types), feeds


Q4, K4, V4 = rand(RNG, 2, 4, 5, 8), rand(RNG, 2, 4, 7, 8), rand(RNG, 2, 4, 7, 8)
KV2 = rand(RNG, 2, 2, 7, 8)  # grouped-query: 2 K/V heads for 4 query heads
X = rand(RNG, 2, 3, 6)
IMG = rand(RNG, 1, 3, 6, 6)
GRID = (RNG.random((1, 4, 5, 2)).astype(np.float32) * 2.4 - 1.2)  # some samples outside [-1, 1]

CASES = {
    "Attention 4-D": _one("Attention", {"Q": Q4, "K": K4, "V": V4}, opset=23),
    "Attention scale": _one("Attention", {"Q": Q4, "K": K4, "V": V4}, opset=23, scale=0.2),
    "Attention causal": _one("Attention", {"Q": rand(RNG, 1, 2, 6, 8), "K": rand(RNG, 1, 2, 6, 8),
                                           "V": rand(RNG, 1, 2, 6, 8)}, opset=23, is_causal=1),
    "Attention causal, more keys": _one("Attention", {"Q": Q4, "K": K4, "V": V4}, opset=23, is_causal=1),
    "Attention float mask": _one("Attention", {"Q": Q4, "K": K4, "V": V4, "M": rand(RNG, 5, 7)}, opset=23),
    "Attention bool mask": _one("Attention", {"Q": Q4, "K": K4, "V": V4,
                                              "M": np.tile(np.array([True] * 5 + [False] * 2), (5, 1))}, opset=23),
    "Attention grouped heads": _one("Attention", {"Q": Q4, "K": KV2, "V": KV2}, opset=23),
    "Attention 3-D": _one("Attention", {"Q": rand(RNG, 2, 5, 32), "K": rand(RNG, 2, 7, 16), "V": rand(RNG, 2, 7, 16)},
                          opset=23, q_num_heads=4, kv_num_heads=2),
    "RMSNormalization": _one("RMSNormalization", {"X": X}, {"S": rand(RNG, 6)}, opset=23, epsilon=1e-6),
    "RMSNormalization axis": _one("RMSNormalization", {"X": X}, {"S": rand(RNG, 3, 6)}, opset=23, axis=1),
    "RotaryEmbedding 4-D": _one("RotaryEmbedding", {"X": rand(RNG, 2, 4, 5, 8)},
                                {"C": rand(RNG, 2, 5, 4), "S": rand(RNG, 2, 5, 4)}, opset=23),
    "RotaryEmbedding interleaved, partial": _one("RotaryEmbedding", {"X": rand(RNG, 2, 4, 5, 8)},
                                                 {"C": rand(RNG, 2, 5, 2), "S": rand(RNG, 2, 5, 2)}, opset=23,
                                                 interleaved=1, rotary_embedding_dim=4),
    "RotaryEmbedding 3-D, position_ids": _one("RotaryEmbedding", {"X": rand(RNG, 1, 5, 16)},
                                              {"C": rand(RNG, 9, 2), "S": rand(RNG, 9, 2),
                                               "P": np.array([[0, 2, 4, 6, 8]], np.int64)}, opset=23, num_heads=4),
    "Scatter (opset 9)": _one("Scatter", {"X": rand(RNG, 3, 4)},
                              {"I": np.array([[1, 0, 2, 1]], np.int64), "U": rand(RNG, 1, 4)}, opset=9, axis=0),
    "Swish": _one("Swish", {"X": X}, opset=24),
    "Swish alpha": _one("Swish", {"X": X}, opset=24, alpha=1.7),
    "CumProd": _one("CumProd", {"X": X}, {"A": np.array(2, np.int64)}, opset=26),
    "CumProd exclusive reverse": _one("CumProd", {"X": X}, {"A": np.array(1, np.int64)}, opset=26,
                                      exclusive=1, reverse=1),
    "GridSample bilinear (16)": _one("GridSample", {"X": IMG, "G": GRID}, opset=16),
    "GridSample nearest border align": _one("GridSample", {"X": IMG, "G": GRID}, opset=16, mode="nearest",
                                            padding_mode="border", align_corners=1),
    "GridSample bicubic reflection": _one("GridSample", {"X": IMG, "G": GRID}, opset=16, mode="bicubic",
                                          padding_mode="reflection"),
    "GridSample linear (20)": _one("GridSample", {"X": IMG, "G": GRID}, opset=20, mode="linear"),
    "EyeLike": _one("EyeLike", {"X": rand(RNG, 4, 6)}, opset=9, k=1),
    "EyeLike int64": _one("EyeLike", {"X": rand(RNG, 5, 3)}, opset=9, dtype=TensorProto.INT64, k=-1,
                          out_types={"Y": TensorProto.INT64}),
    "ReverseSequence time-major": _one("ReverseSequence", {"X": rand(RNG, 5, 3, 2)},
                                       {"L": np.array([5, 2, 0], np.int64)}, opset=10),
    "ReverseSequence batch-major": _one("ReverseSequence", {"X": rand(RNG, 3, 5, 2)},
                                        {"L": np.array([1, 4, 5], np.int64)}, opset=10, batch_axis=0, time_axis=1),
}

@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_newer_op_converter_matches_ort(case):
    model, feeds = CASES[case]
    assert_matches_ort(model, feeds, atol=2e-5, rtol=1e-4, export=True)


def test_attention_with_a_kv_cache_is_refused_by_name():
    from onnx_torch.module import ConversionError

    from onnx_parity import ort_outputs, torch_module

    model, feeds = _one("Attention", {"Q": Q4, "K": K4, "V": V4, "M": rand(RNG, 5, 10), "PK": rand(RNG, 2, 4, 3, 8),
                                      "PV": rand(RNG, 2, 4, 3, 8)}, opset=23,
                        outputs=("Y", "present_key", "present_value"))
    ort_outputs(model, feeds)  # ORT runs it: a valid model, and one this converter does not cover
    with pytest.raises(ConversionError, match="Attention node 'n0': Attention with past_key"):
        torch_module(model, feeds)
