"""Files as the pipeline reads them: one digest for every file it identifies, ONNX files loaded once."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import numpy_helper
from onnx.external_data_helper import load_external_data_for_tensor

from service.pipeline.vocabulary import GraphIndex, graph_from_model
from service.schemas.options import LEVELS

_CHUNK = 1 << 20  # uploads and artifacts can be GBs: hash in chunks, never read whole


def split_name(name: str) -> tuple[str, str | None]:
    """An artifact's file name -> (artifact, level): 'ort_qdq.all.onnx' -> ('ort_qdq', 'all'); 'fp32.onnx' -> ('fp32', None)."""
    stem = name[:-5] if name.endswith(".onnx") else name
    artifact, _, rest = stem.partition(".")
    level = rest if rest in LEVELS else None
    return artifact, level


def file_sha256(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def has_external_initializers(model) -> bool:
    """Some initializer of ``model`` (loaded with or without its data) lives in an external data file."""
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def external_data_bytes(model, base_dir: Path) -> int:
    """Bytes of the external data files ``model``'s initializers name (each file once), as they lie
    in ``base_dir``; files that are not there count 0."""
    locations = {e.value for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
                 for e in t.external_data if e.key == "location"}
    total = 0
    for name in locations:
        path = Path(base_dir) / name
        if path.is_file():
            total += path.stat().st_size
    return total


# A repeated initializer smaller than this is a scale, a zero point or a shape: exporters repeat those
# by design, and they cost nothing. A weight is larger.
REPEATED_MIN_BYTES = 1024


@dataclass(frozen=True)
class RepeatedContent:
    """Initializers of one file with the same dtype, shape and bytes, stored under several names."""

    names: list[str]
    nbytes: int  # of one copy


def _stored_bytes(t, base_dir: Path) -> bytes | None:
    """The bytes ``t`` stores, read from its external data file if it has one; None when unreadable."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        path = Path(base_dir) / info.get("location", "")
        try:
            with open(path, "rb") as f:
                f.seek(int(info.get("offset", 0)))
                return f.read(int(info["length"])) if "length" in info else None
        except (OSError, ValueError):
            return None
    return t.raw_data if t.HasField("raw_data") else numpy_helper.to_array(t).tobytes()


def declared_bytes(t) -> int | None:
    """The bytes a tensor's dims and dtype declare (its data unread); None for strings and for a dtype
    this onnx has no numpy type for."""
    if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    n = 1
    for d in t.dims:
        n *= d
    try:
        return n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def repeated_initializers(model, base_dir: Path, *, min_bytes: int = REPEATED_MIN_BYTES) -> list[RepeatedContent]:
    """The main graph's initializers of ``min_bytes`` or more that store the same content as another
    (same dtype, shape and bytes), grouped; largest waste first. Only tensors that share dtype and shape
    with another are read, so a file without repeats costs a pass over its initializer headers."""
    by_kind: dict[tuple, list] = defaultdict(list)
    for t in model.graph.initializer:
        nbytes = declared_bytes(t)
        if nbytes is not None and nbytes >= min_bytes:
            by_kind[(t.data_type, tuple(t.dims))].append((t, nbytes))
    groups = []
    for tensors in by_kind.values():
        if len(tensors) < 2:
            continue
        by_content: dict[bytes, list[str]] = defaultdict(list)
        for t, nbytes in tensors:
            data = _stored_bytes(t, base_dir)
            if data is not None:
                by_content[hashlib.blake2b(data, digest_size=16).digest()].append(t.name)
        groups += [RepeatedContent(names, nbytes) for names in by_content.values() if len(names) > 1]
    return sorted(groups, key=lambda g: -(len(g.names) - 1) * g.nbytes)


def inline_small_external_tensors(graph, base_dir: Path, max_elements: int = 4096) -> None:
    """Read integer and small external tensors into the graph: shape inference needs the values of
    the constants that shapes are computed from (a Reshape's target shape, Slice bounds), and some
    exporters write every initializer to the data file, however small."""
    ints = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
            onnx.TensorProto.UINT8, onnx.TensorProto.BOOL}
    for t in graph.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type in ints or n <= max_elements:
            load_external_data_for_tensor(t, str(base_dir))
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]


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
