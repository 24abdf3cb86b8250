"""Files as the pipeline reads them: one digest function for every file it identifies."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20  # uploads and artifacts can be GBs: hash in chunks, never read whole


def file_sha256(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()
