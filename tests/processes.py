"""Process checks the cancellation tests share."""

from __future__ import annotations

import time

import psutil


def gone(pid: int, timeout: float = 5.0) -> bool:
    """Whether ``pid`` ends (or is a zombie: killed, not yet reaped) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False
