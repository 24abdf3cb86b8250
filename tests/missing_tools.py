"""A missing tool skips a test on a developer's machine and fails it under CI.

CI runs `make test`, which installs every tool the suite drives (`make system-deps`); a tool that is
still missing there means the set-up broke, and a skip would hide exactly that.
"""

from __future__ import annotations

import os

import pytest

_FALSY = {"", "0", "false", "no", "off"}


def running_under_ci() -> bool:
    """Any truthy CI variable (GitHub sets `true`, some runners `1` or `yes`)."""
    return os.environ.get("CI", "").strip().lower() not in _FALSY


def skip_or_fail(reason: str):
    """Skip locally; fail under CI, where `make system-deps` should have installed the tool."""
    if running_under_ci():
        pytest.fail(f"{reason} (under CI every tool must be installed)")
    pytest.skip(reason)


def require_module(name: str):
    """``import name``, pinned in pyproject's test extra: a missing one is a broken set-up, not a reason
    to skip quietly (pytest.importorskip would skip even under CI)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        reason = f"{name} is not installed (pip install -e '.[test]')"
        if running_under_ci():
            pytest.fail(f"{reason} (under CI every test dependency must be installed)")
        pytest.skip(reason, allow_module_level=True)
