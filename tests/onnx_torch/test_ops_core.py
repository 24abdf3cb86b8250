"""C1's converters against ORT (the oracle), one generated model per op and attribute variant:
elementwise, activations, MatMul/Gemm/Einsum, normalizations, shape & data movement, reductions
(attribute and input forms), Softmax (pre/post opset 13), CumSum, TopK, Cast, Constant*."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_parity import assert_matches_ort, make_model, rand

RNG = np.random.default_rng(0)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _i(*v):
    return np.array(v, dtype=np.int64)


def one(op, feeds, inits=None, *, opset=17, outputs=("Y",), out_types=None, inputs=None, **attrs):
    names = inputs if inputs is not None else [*feeds, *(inits or {})]
    node = helper.make_node(op, names, list(outputs), name="n0", **attrs)
    return make_model(node, feeds, list(outputs), initializers=inits, opset=opset, output_types=out_types), feeds


X = rand(RNG, 2, 3, 4)
X4 = rand(RNG, 2, 3, 4, 5)
POS = np.abs(X) + 0.1

CASES = {
    # elementwise -------------------------------------------------------------------------
    "Add broadcast": one("Add", {"A": X, "Bb": rand(RNG, 4)}),
    "Sub": one("Sub", {"A": X, "Bb": rand(RNG, 3, 1)}),
    "Mul": one("Mul", {"A": X}, {"Bb": rand(RNG, 1, 3, 1)}),
    "Div float": one("Div", {"A": X, "Bb": POS}),
    "Div int truncates": one("Div", {"A": _i(7, -7, 9), "Bb": _i(2, 2, -4)}, out_types={"Y": I64}),
    "Pow": one("Pow", {"A": POS}, {"E": np.array(2.5, np.float32)}),
    "Mod fmod": one("Mod", {"A": X, "Bb": POS}, fmod=1),
    "Mod int": one("Mod", {"A": _i(7, -7, 9), "Bb": _i(3, 3, -4)}, out_types={"Y": I64}),
    "Sqrt": one("Sqrt", {"A": POS}), "Exp": one("Exp", {"A": X}), "Log": one("Log", {"A": POS}),
    "Neg": one("Neg", {"A": X}), "Abs": one("Abs", {"A": X}), "Reciprocal": one("Reciprocal", {"A": POS}),
    "Floor": one("Floor", {"A": X}), "Ceil": one("Ceil", {"A": X}), "Erf": one("Erf", {"A": X}),
    "Round half even": one("Round", {"A": np.array([0.5, 1.5, 2.5, -0.5, 1.2], np.float32)}),
    "Sin": one("Sin", {"A": X}), "Cos": one("Cos", {"A": X}),
    "Max variadic": one("Max", {"A": X, "Bb": rand(RNG, 4), "C": rand(RNG, 3, 1)}),
    "Min": one("Min", {"A": X, "Bb": rand(RNG, 4)}), "Sum": one("Sum", {"A": X, "Bb": X * 2}),
    "Mean": one("Mean", {"A": X, "Bb": X * 3, "C": X}),
    "Equal": one("Equal", {"A": _i(1, 2, 3), "Bb": _i(1, 0, 3)}, out_types={"Y": B}),
    "Greater": one("Greater", {"A": X, "Bb": rand(RNG, 4)}, out_types={"Y": B}),
    "LessOrEqual": one("LessOrEqual", {"A": X, "Bb": rand(RNG, 4)}, out_types={"Y": B}),
    "Not": one("Not", {"A": np.array([True, False])}, out_types={"Y": B}),
    "Where": one("Where", {"C": X > 0, "A": X, "Bb": rand(RNG, 4)}),
    # activations -------------------------------------------------------------------------
    "Relu": one("Relu", {"A": X}), "Sigmoid": one("Sigmoid", {"A": X}), "Tanh": one("Tanh", {"A": X}),
    "LeakyRelu": one("LeakyRelu", {"A": X}, alpha=0.2),
    "PRelu per channel": one("PRelu", {"A": X4}, {"S": rand(RNG, 3, 1, 1)}),
    "PRelu scalar": one("PRelu", {"A": X4}, {"S": np.array([0.3], np.float32)}),
    "PRelu per channel 4-d slope": one("PRelu", {"A": X4}, {"S": rand(RNG, 1, 3, 1, 1)}),  # Keras exports
    "PRelu per channel on 2-d": one("PRelu", {"A": rand(RNG, 2, 6)}, {"S": rand(RNG, 6)}),
    "PRelu full": one("PRelu", {"A": X}, {"S": rand(RNG, 3, 4)}),
    "HardSigmoid": one("HardSigmoid", {"A": X * 4}, alpha=0.3, beta=0.4),
    "HardSigmoid torch": one("HardSigmoid", {"A": X * 4}, alpha=1 / 6, beta=0.5),
    "HardSwish": one("HardSwish", {"A": X * 4}),
    "Gelu none": one("Gelu", {"A": X}, opset=20), "Gelu tanh": one("Gelu", {"A": X}, opset=20, approximate="tanh"),
    "Softplus": one("Softplus", {"A": X}), "Elu": one("Elu", {"A": X}, alpha=0.5),
    "Selu": one("Selu", {"A": X}), "Celu": one("Celu", {"A": X}), "Mish": one("Mish", {"A": X}, opset=18),
    "Softsign": one("Softsign", {"A": X}), "ThresholdedRelu": one("ThresholdedRelu", {"A": X}, alpha=0.3),
    "Clip attr (opset 6)": one("Clip", {"A": X}, opset=6, min=-0.5, max=0.5),
    "Clip inputs": one("Clip", {"A": X}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}),
    "Clip relu6": one("Clip", {"A": X * 8}, {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}),
    "Clip min only": one("Clip", {"A": X}, {"lo": np.array(0.1, np.float32)}),
    "Clip runtime bounds": one("Clip", {"A": X, "lo": np.array(-0.2, np.float32), "hi": np.array(0.3, np.float32)}),
    # math ----------------------------------------------------------------------------------
    "MatMul weight": one("MatMul", {"A": X}, {"W": rand(RNG, 4, 6)}),
    "MatMul batched": one("MatMul", {"A": X, "Bb": rand(RNG, 2, 4, 5)}),
    "MatMul 1d": one("MatMul", {"A": rand(RNG, 4)}, {"W": rand(RNG, 4, 6)}),
    "Gemm transB bias": one("Gemm", {"A": rand(RNG, 3, 4)}, {"W": rand(RNG, 5, 4), "C": rand(RNG, 5)}, transB=1),
    "Gemm alpha beta transA": one("Gemm", {"A": rand(RNG, 4, 3)}, {"W": rand(RNG, 4, 5), "C": rand(RNG, 3, 5)},
                                  transA=1, alpha=0.5, beta=2.0),
    "Gemm no C": one("Gemm", {"A": rand(RNG, 3, 4)}, {"W": rand(RNG, 4, 5)}),
    "Gemm C broadcast 1x1": one("Gemm", {"A": rand(RNG, 3, 4)}, {"W": rand(RNG, 4, 5), "C": rand(RNG, 1, 1)}),
    "Einsum": one("Einsum", {"A": X, "Bb": rand(RNG, 2, 4, 5)}, equation="bij,bjk->bik"),
    # normalization -------------------------------------------------------------------------
    "BatchNormalization": one("BatchNormalization", {"A": X4}, {"s": rand(RNG, 3), "b": rand(RNG, 3),
                                                                "m": rand(RNG, 3), "v": POS[0, :, 0]}),
    "LayerNormalization axis -1": one("LayerNormalization", {"A": X4}, {"s": rand(RNG, 5), "b": rand(RNG, 5)}),
    "LayerNormalization axis 2": one("LayerNormalization", {"A": X4}, {"s": rand(RNG, 4, 5), "b": rand(RNG, 4, 5)},
                                     axis=2, epsilon=1e-3),
    "LayerNormalization no bias": one("LayerNormalization", {"A": X4}, {"s": rand(RNG, 5)}),
    "InstanceNormalization": one("InstanceNormalization", {"A": X4}, {"s": rand(RNG, 3), "b": rand(RNG, 3)}),
    "GroupNormalization 21": one("GroupNormalization", {"A": rand(RNG, 2, 4, 3, 3)},
                                 {"s": rand(RNG, 4), "b": rand(RNG, 4)}, opset=21, num_groups=2),
    "LpNormalization": one("LpNormalization", {"A": X}, axis=1),
    # GoogLeNet / AlexNet (Caffe-era zoo files); ORT's kernel takes rank 4 and odd sizes only (lrn.h)
    "LRN size 5": one("LRN", {"A": rand(RNG, 2, 7, 4, 5)}, size=5, alpha=1e-2, beta=0.75, bias=1.0),
    "LRN size 3": one("LRN", {"A": rand(RNG, 1, 6, 5, 3)}, size=3, alpha=0.5, beta=0.6, bias=2.0),
    # shape & data movement --------------------------------------------------------------------
    "Reshape 0 and -1": one("Reshape", {"A": X4}, {"s": _i(0, -1, 5)}),
    "Reshape allowzero": one("Reshape", {"A": X}, {"s": _i(4, 3, 2)}, opset=14, allowzero=1),
    "Flatten axis 2": one("Flatten", {"A": X4}, axis=2), "Flatten axis 0": one("Flatten", {"A": X4}, axis=0),
    "Squeeze input (13)": one("Squeeze", {"A": rand(RNG, 2, 1, 3, 1)}, {"ax": _i(1, -1)}),
    "Squeeze attr (11)": one("Squeeze", {"A": rand(RNG, 2, 1, 3, 1)}, opset=11, axes=[1]),
    "Squeeze all": one("Squeeze", {"A": rand(RNG, 2, 1, 3, 1)}),
    "Unsqueeze input (13)": one("Unsqueeze", {"A": X}, {"ax": _i(0, -1)}),
    "Unsqueeze attr (11)": one("Unsqueeze", {"A": X}, opset=11, axes=[1, 4]),
    "Transpose": one("Transpose", {"A": X4}, perm=[0, 2, 3, 1]), "Transpose default": one("Transpose", {"A": X}),
    "Concat": one("Concat", {"A": X, "Bb": rand(RNG, 2, 3, 2)}, axis=-1),
    "Split input (13)": one("Split", {"A": X4}, {"sp": _i(1, 4)}, axis=3, outputs=("Y", "Z")),
    "Split attr (11)": one("Split", {"A": X4}, opset=11, axis=1, split=[2, 1], outputs=("Y", "Z")),
    "Split even": one("Split", {"A": X4}, axis=2, outputs=("Y", "Z")),
    "Split num_outputs (18)": one("Split", {"A": rand(RNG, 2, 7)}, opset=18, axis=1, num_outputs=3,
                                  outputs=("Y", "Z", "W")),
    "Slice inputs": one("Slice", {"A": X4}, {"st": _i(1, -3), "en": _i(100, -1), "ax": _i(2, 3), "sp": _i(1, 1)}),
    "Slice negative step": one("Slice", {"A": X4}, {"st": _i(-1), "en": _i(-100), "ax": _i(3), "sp": _i(-2)}),
    "Slice attr (9)": one("Slice", {"A": X4}, opset=9, starts=[1], ends=[3], axes=[2]),
    "Gather axis 1 neg idx": one("Gather", {"A": X}, {"ix": _i(-1, 0, 2)}, axis=1),
    "Gather scalar idx": one("Gather", {"A": X}, {"ix": np.array(-2, np.int64)}, axis=2),
    "Gather embedding runtime ids": one("Gather", {"ix": _i(0, 3, 1)}, {"E": rand(RNG, 5, 4)}, inputs=["E", "ix"]),
    "GatherElements": one("GatherElements", {"A": X}, {"ix": RNG.integers(-4, 4, (2, 3, 2))}, axis=2),
    "Expand bidirectional": one("Expand", {"A": rand(RNG, 3, 1)}, {"s": _i(2, 1, 4)}),
    "Tile": one("Tile", {"A": X}, {"r": _i(1, 2, 3)}),
    "Cast float->int truncates": one("Cast", {"A": X * 5}, to=TensorProto.INT64, out_types={"Y": I64}),
    "Cast int->float": one("Cast", {"A": _i(1, -2)}, to=TensorProto.FLOAT),
    "DepthToSpace DCR": one("DepthToSpace", {"A": rand(RNG, 1, 8, 2, 3)}, blocksize=2),
    "DepthToSpace CRD": one("DepthToSpace", {"A": rand(RNG, 1, 8, 2, 3)}, blocksize=2, mode="CRD"),
    "SpaceToDepth": one("SpaceToDepth", {"A": rand(RNG, 1, 2, 4, 6)}, blocksize=2),
    "Trilu lower k": one("Trilu", {"A": rand(RNG, 4, 5)}, {"k": np.array(1, np.int64)}, upper=0),
    "ScatterElements add": one("ScatterElements", {"A": X, "U": rand(RNG, 2, 3, 1)},
                               {"ix": np.zeros((2, 3, 1), np.int64)}, inputs=["A", "ix", "U"], axis=2,
                               reduction="add"),
    # reductions ---------------------------------------------------------------------------
    "ReduceMean attr (13)": one("ReduceMean", {"A": X4}, opset=13, axes=[2, 3], keepdims=1),
    "ReduceMean input (18)": one("ReduceMean", {"A": X4}, {"ax": _i(-1)}, opset=18, keepdims=0),
    "ReduceSum attr (11)": one("ReduceSum", {"A": X4}, opset=11, axes=[1]),
    "ReduceSum input (13)": one("ReduceSum", {"A": X4}, {"ax": _i(1, 2)}, opset=13, keepdims=0),
    "ReduceSum all": one("ReduceSum", {"A": X4}, opset=13, keepdims=0),
    "ReduceMax input (18)": one("ReduceMax", {"A": X4}, {"ax": _i(0)}, opset=18),
    "ReduceMin attr": one("ReduceMin", {"A": X4}, axes=[3]),
    "ReduceProd": one("ReduceProd", {"A": X4}, axes=[3, 1], keepdims=0),
    "ReduceL2 (18)": one("ReduceL2", {"A": X4}, {"ax": _i(3)}, opset=18),
    "ReduceLogSumExp": one("ReduceLogSumExp", {"A": X4}, axes=[2]),
    "ReduceSumSquare": one("ReduceSumSquare", {"A": X4}, axes=[1]),
    "ArgMax": one("ArgMax", {"A": X4}, axis=2, keepdims=0, out_types={"Y": I64}),
    "ArgMin last index": one("ArgMin", {"A": np.array([[1, 0, 0, 2]], np.float32)}, axis=1, select_last_index=1,
                             out_types={"Y": I64}),
    # softmax & friends ------------------------------------------------------------------------
    "Softmax 13 axis 1": one("Softmax", {"A": X4}, opset=13, axis=1),
    "Softmax 11 coerces to 2d": one("Softmax", {"A": X4}, opset=11, axis=1),
    "LogSoftmax 11 last axis": one("LogSoftmax", {"A": X4}, opset=11, axis=-1),
    "Hardmax 13": one("Hardmax", {"A": X4}, opset=13, axis=2),
    "CumSum": one("CumSum", {"A": X}, {"ax": np.array(2, np.int64)}),
    "CumSum reverse exclusive": one("CumSum", {"A": X}, {"ax": np.array(1, np.int64)}, reverse=1, exclusive=1),
    "TopK": one("TopK", {"A": X4}, {"k": _i(2)}, axis=2, outputs=("Y", "Z"), out_types={"Z": I64}),
    "TopK smallest": one("TopK", {"A": X4}, {"k": _i(3)}, largest=0, outputs=("Y", "Z"), out_types={"Z": I64}),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_converter_matches_ort(case):
    model, feeds = CASES[case]
    assert_matches_ort(model, feeds, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", ["MatMul weight", "Gemm transB bias", "Split input (13)", "Slice negative step",
                                  "Gather embedding runtime ids", "TopK", "Softmax 11 coerces to 2d"])
def test_converter_exports(case):
    model, feeds = CASES[case]
    assert_matches_ort(model, feeds, atol=1e-5, rtol=1e-4, export=True)
