"""Fixtures for the security tests: live servers on loopback, hostile files built in code."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for folder in (HERE.parent / "api", HERE.parent / "safety", HERE.parent / "jobs", HERE):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
