"""The sets of ONNX ops the converter treats apart, and how it reads the default domain.

Its own (it imports nothing of the service); tests/onnx_torch/test_package.py pins the two the service's
vocabulary names too (RANDOM_OPS, SHAPE_READING_OPS) to be the same sets there.
"""

from __future__ import annotations

# Ops that draw random numbers (ONNX spec: the *Like ones read an input's shape; none is seeded alike in
# torch and ORT, so a converted module's draws are not compared).
RANDOM_OPS = frozenset({"RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
                        "RandomNormal", "RandomUniform"})
# Ops whose output is a shape or an element count, not data.
SHAPE_READING_OPS = frozenset({"Shape", "Size"})
# The selections the converter carries whole: their count becomes a torch SymInt (data_sizes.py).
CONVERTED_SELECTION_OPS = frozenset({"NonZero"})
# Shape arithmetic the converter evaluates on such a count (numpy on ints and SymInts) rather than as torch ops.
SIZE_ARITHMETIC_OPS = frozenset({"Identity", "Cast", "Unsqueeze", "Squeeze", "Concat", "Gather", "Slice", "Add", "Sub",
                                 "Mul", "Div", "Neg", "Max", "Min", "ReduceProd", "ReduceSum"})


def is_onnx_domain(domain: str | None) -> bool:
    """ONNX spells its default domain both "" and "ai.onnx"."""
    return (domain or "") in ("", "ai.onnx")


def ai_onnx_opset(model, default: int | None = None) -> int | None:
    """The version of the default domain ``model`` imports; ``default`` when it imports none."""
    return next((o.version for o in model.opset_import if is_onnx_domain(o.domain)), default)
