"""Parity harness for the onnx_torch converters: a one-node ONNX model built with onnx.helper, run
by ONNX Runtime (the oracle) and by the converted torch module (through the core's public
``build_module``), outputs compared; optionally the module goes through torch.export too.

A plain module imported by the test_ops_* files (not a conftest, so it cannot clash with the core's).
"""
from __future__ import annotations

from typing import Any

import numpy as np


def _elem_type(arr: np.ndarray) -> int:
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.asarray(arr).dtype)


def make_model(nodes, feeds: dict[str, np.ndarray], outputs: list[str], *,
               initializers: dict[str, np.ndarray] | None = None, opset: int = 17,
               output_types: dict[str, int] | None = None):
    """A model whose graph inputs are ``feeds`` (names, dtypes, static shapes) and whose outputs
    are ``outputs`` (float unless ``output_types`` says otherwise; shape left to inference)."""
    import onnx
    from onnx import TensorProto

    from tests import models

    if not isinstance(nodes, (list, tuple)):
        nodes = [nodes]
    return models.from_nodes(
        nodes, [(n, np.asarray(a).shape, _elem_type(a)) for n, a in feeds.items()],
        [(o, None, (output_types or {}).get(o, TensorProto.FLOAT)) for o in outputs], initializers or {},
        opset=opset, ir=min(onnx.IR_VERSION, 10))


def ort_outputs(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ORT's CPU kernels with graph optimizations off: the kernels' own semantics, nothing fused."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def reference_outputs(model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnx's reference evaluator: the oracle where ORT's CPU kernels refuse a variant."""
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]


def torch_module(model, feeds: dict[str, np.ndarray]):
    from onnx_torch.module import build_module

    return build_module(model, list(feeds), dict(feeds)).module


def _as_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def assert_matches_ort(model, feeds: dict[str, np.ndarray], *, atol: float = 1e-5, rtol: float = 1e-5,
                       export: bool = False, oracle: str = "ort") -> list[np.ndarray]:
    """Converted module == ORT (or ``oracle="reference"``: onnx's reference evaluator) on
    ``feeds`` (shapes and values); with ``export`` the torch.export program too. Returns the
    oracle's outputs."""
    import torch

    want = ort_outputs(model, feeds) if oracle == "ort" else reference_outputs(model, feeds)
    module = torch_module(model, feeds)
    args = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values())
    with torch.no_grad():
        got = [t.numpy() for t in _as_list(module(*args))]
    _compare(got, want, atol, rtol, "eager")
    if export:
        program = torch.export.export(module, args)
        got = [t.detach().numpy() for t in _as_list(program.module()(*args))]
        _compare(got, want, atol, rtol, "torch.export")
    return want


def _compare(got, want, atol, rtol, what):
    assert len(got) == len(want), f"{what}: {len(got)} outputs, ORT {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{what} output {k}: shape {g.shape}, ORT {w.shape}"
        np.testing.assert_allclose(g, w, atol=atol, rtol=rtol, err_msg=f"{what} output {k}")


def rand(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)
