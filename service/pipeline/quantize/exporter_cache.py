"""Build torch.onnx's function registry once per process instead of once per export.

``torch.onnx.export(dynamo=True)`` calls ``ONNXRegistry.from_torchlib()`` on every export: it
walks every torchlib function and builds its signature, 0.4-0.8 s each time, paid twice per job
(fp32 and pt2e_qdq) even in a warm worker. Memoized per opset *and per set of registered ops*:
the registry only holds functions for ops that exist when it is built, and torchao registers its
``quantized_decomposed`` ops when PT2E is first imported, after the fp32 export may have run; so
the number of ops the dispatcher knows is part of the key (3 ms to read), and a registry built
before torchao loaded is never reused after. Each call still gets its own registry (a fresh
object with copied function lists), so a call that registers custom translations cannot leak
them into the next. The exported bytes are identical (a test pins it).

This touches a private torch API; torch is pinned (2.13.0), and if the API moves, the cache is
simply not installed and exports take the usual path.
"""

from __future__ import annotations

import logging

log = logging.getLogger("quantcompare.exporter_cache")

_installed = False


def install_exporter_registry_cache() -> bool:
    global _installed
    if _installed:
        return True
    try:
        from torch.onnx._internal.exporter import _registration

        cls = _registration.ONNXRegistry
        original = cls.__dict__["from_torchlib"]
        default_opset = _registration._constants.TORCHLIB_OPSET
        if not isinstance(original, classmethod) or set(vars(cls())) != {"_opset_version", "functions"}:
            raise AttributeError("ONNXRegistry changed shape")
    except (ImportError, AttributeError, KeyError) as e:
        log.info("exporter registry cache not installed: %s", e)
        return False
    import torch

    built: dict[tuple[int, int], object] = {}

    def from_torchlib(klass, opset_version=default_opset):
        key = (opset_version, len(torch._C._dispatch_get_all_op_names()))
        base = built.get(key)
        if base is None:
            base = built[key] = original.__func__(klass, opset_version)
        fresh = klass()
        fresh._opset_version = base._opset_version
        fresh.functions = {k: list(v) for k, v in base.functions.items()}
        return fresh

    cls.from_torchlib = classmethod(from_torchlib)
    cls._quantcompare_original_from_torchlib = original
    _installed = True
    return True


def uninstall_exporter_registry_cache() -> None:
    global _installed
    from torch.onnx._internal.exporter import _registration

    original = getattr(_registration.ONNXRegistry, "_quantcompare_original_from_torchlib", None)
    if original is not None:
        _registration.ONNXRegistry.from_torchlib = original
        del _registration.ONNXRegistry._quantcompare_original_from_torchlib
    _installed = False
