"""Patches to the toolchains, applied at run time: a torchao, onnxscript or ORT function replaced once per
process by one that computes the same result faster (pt2e.py for torchao and onnxscript, ort.py for ORT's
quantizer). Each keeps the original as ``.original``; tests compare both byte for byte."""

from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("quantcompare.toolchain_patches")

_installed: set[str] = set()


def replace_once(what: str, locate: Callable[[], tuple[object, str]], replacement: Callable[[Callable], Callable]) -> bool:
    """Set ``owner.attr`` (``locate()``) to ``replacement(original)`` once per process, keeping the
    original as ``.original``. False, and the toolchain left as it is, when the names have moved."""
    if what in _installed:
        return True
    try:
        owner, attr = locate()
        original = getattr(owner, attr)
    except (ImportError, AttributeError) as e:
        log.info("%s not installed: %s", what, e)
        return False
    new = replacement(original)
    new.original = original  # type: ignore[attr-defined]
    setattr(owner, attr, new)
    _installed.add(what)
    return True
