"""Files as the pipeline reads them: one digest for every file it identifies, ONNX files loaded once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from service.pipeline.vocabulary import GraphIndex, graph_from_model

_CHUNK = 1 << 20  # uploads and artifacts can be GBs: hash in chunks, never read whole


def file_sha256(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class OnnxFile:
    """One ONNX file loaded once: its path, its model and (built on first use) its graph index.

    The stages hand this object on instead of a path, so no stage parses the file again.
    """

    path: Path
    model: onnx.ModelProto
    _index: GraphIndex | None = field(default=None, repr=False)

    @classmethod
    def load(cls, path: Path, *, external_data: bool = True) -> "OnnxFile":
        return cls(Path(path), onnx.load(str(path), load_external_data=external_data))

    @property
    def index(self) -> GraphIndex:
        if self._index is None:
            self._index = graph_from_model(self.model)
        return self._index
