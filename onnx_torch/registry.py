"""The converter registry: which Python function turns one ONNX node into torch ops.

A converter receives the node (attributes decoded to Python values), the torch tensors
for its inputs (None for an omitted optional input) and a ConvertContext that answers
static questions (constant values, shapes, dtypes) from the specialized ONNX model.
Static values (shapes, pads, axes, k, scales) are read with ctx.const(...) as numpy,
never from traced tensors, so torch.export sees no data-dependent shape arithmetic.

Converters register per (domain, op_type) for an opset range [since, until]; several
ranges may coexist for one op when ONNX changed its semantics between opsets.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, Union

import numpy as np

from .op_sets import is_onnx_domain

if TYPE_CHECKING:  # pragma: no cover - typing only
    import onnx
    import torch


@dataclass(frozen=True)
class OnnxNode:
    """One ONNX node, attributes already decoded to Python values.

    attrs: ints/floats/strings(str)/lists; TensorProto -> np.ndarray; GraphProto stays GraphProto.
    inputs/outputs: "" for an omitted optional input/output.
    """

    op_type: str
    domain: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)


class ConvertContext(Protocol):
    opset: int  # the ai.onnx opset of the model

    def const(self, name: str) -> np.ndarray | None:
        """Static value if known at conversion (initializer or folded), else None."""

    def shape(self, name: str) -> tuple[int, ...] | None:
        """Static shape from shape inference after specialization."""

    def dtype(self, name: str) -> np.dtype | None: ...

    def run_subgraph(
        self, graph: "onnx.GraphProto", inputs: dict[str, "torch.Tensor"]
    ) -> list["torch.Tensor"]:
        """Run an If/Loop body; outer-scope names are visible inside it."""


Converter = Callable[
    [ConvertContext, OnnxNode, list[Union["torch.Tensor", None]]],
    Union["torch.Tensor", Sequence[Union["torch.Tensor", None]]],
]


class UnsupportedNode(Exception):
    """Raised by a converter for an attribute/input variant it cannot convert.

    The message names what (e.g. "Resize: coordinate_transformation_mode=tf_crop_and_resize").
    """


@dataclass(frozen=True)
class _Entry:
    since: int
    until: int | None
    fn: Converter


_REGISTRY: dict[tuple[str, str], list[_Entry]] = {}

# The domain of nodes the module builder makes by fusing upload nodes (module.fused_linear_bias): the
# registry's, so the builder and the op modules both read it here (module.py imports no op module).
FUSED_DOMAIN = "quantcompare"

def _norm_domain(domain: str) -> str:
    return "" if is_onnx_domain(domain) else domain


def converter(op_type: str, *, domain: str = "", since: int = 1, until: int | None = None):
    """Decorator: register fn as the converter of (domain, op_type) for opsets [since, until]."""

    def register(fn: Converter) -> Converter:
        key = (_norm_domain(domain), op_type)
        entries = _REGISTRY.setdefault(key, [])
        for e in entries:
            lo, hi = e.since, e.until if e.until is not None else 10**9
            new_hi = until if until is not None else 10**9
            if since <= hi and lo <= new_hi:
                raise ValueError(
                    f"converter for {key} opsets [{since}, {until}] overlaps "
                    f"{e.fn.__module__}.{e.fn.__name__} [{e.since}, {e.until}]"
                )
        entries.append(_Entry(since, until, fn))
        return fn

    return register


def find_converter(domain: str, op_type: str, opset: int) -> Converter | None:
    """The converter registered for this op at this opset, or None."""
    _load_ops()
    for e in _REGISTRY.get((_norm_domain(domain), op_type), ()):
        if e.since <= opset and (e.until is None or opset <= e.until):
            return e.fn
    return None


def registered_ops() -> list[tuple[str, str, int, int | None]]:
    """(domain, op_type, since, until) of every registered converter, for docs and tests."""
    _load_ops()
    return sorted(
        (d, op, e.since, e.until) for (d, op), es in _REGISTRY.items() for e in es
    )


_LOADED = False


def _load_ops() -> None:
    """Import every module under ops/ (sub-packages too) once so their @converter decorators run."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    ops = importlib.import_module(f"{__package__}.ops")
    for info in pkgutil.walk_packages(ops.__path__, f"{ops.__name__}."):
        importlib.import_module(info.name)
