"""Folders the security tests put on a server's PYTHONPATH (its job functions live there)."""

from pathlib import Path

SECURITY_TESTS = Path(__file__).resolve().parent
