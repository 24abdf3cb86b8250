"""A ``torch.nn.Module`` -> ``.pt2`` bytes, in memory, for ``Client.compare(module, example_inputs=...)``.

torch is never imported here unless a caller hands over a module: :func:`is_torch_module` only
looks at ``sys.modules``, because an object cannot be an ``nn.Module`` unless torch is already
loaded. The base client therefore stays httpx-only.
"""

from __future__ import annotations

import io
import sys
from typing import Any, Optional


def is_torch_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def pt2_from_module(module: Any, example_inputs: Any, dynamic_shapes: Optional[Any] = None) -> bytes:
    """``torch.export.export`` the module on ``example_inputs`` and ``torch.export.save`` it to bytes.

    ``example_inputs``: a tensor or a tuple of positional inputs, as ``torch.export.export`` takes;
    ``dynamic_shapes``: passed through (e.g. ``{"x": {0: torch.export.Dim("batch")}}``).
    """
    import torch  # already loaded: is_torch_module said so

    if example_inputs is None:
        raise ValueError("a torch.nn.Module needs example_inputs (a tensor or a tuple of tensors) to be exported")
    args = example_inputs if isinstance(example_inputs, tuple) else (
        tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,))
    was_training = module.training
    module.eval()  # the service quantizes for inference; export the inference graph
    try:
        program = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        raise ValueError(f"torch.export.export failed on {type(module).__name__}: {type(e).__name__}: {e}") from e
    finally:
        module.train(was_training)
    buf = io.BytesIO()
    torch.export.save(program, buf)
    return buf.getvalue()
