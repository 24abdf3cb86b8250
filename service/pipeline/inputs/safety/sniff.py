"""What an upload is, decided by its bytes (never by its name or extension).

Only two answers: ``"onnx"`` (a serialized ``onnx.ModelProto``) and ``"pt2"`` (a zip that carries
the torch.export archive markers). Everything else is an :class:`InvalidModel` that says what the
bytes look like and what to upload instead. Sniffing is cheap and framework-free (onnx's protobuf
classes only); the deep checks live in :mod:`.onnx_checks` and :mod:`.pt2_checks`.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Literal

from service.errors import InvalidModel, UnsupportedModel

ModelFormat = Literal["onnx", "pt2"]

_UPLOAD_HINT = "Upload an ONNX model (.onnx) or a torch.export archive written by torch.export.save (.pt2)."
_ARCHIVE_HINT = (
    "A .zip or .tar(.gz) of an ONNX model plus its external data files is accepted only where the API "
    "documents archive uploads; otherwise upload the .onnx file itself (with its data embedded)."
)


def sniff_model_format(path: Path, *, allow_pt2: bool = True) -> ModelFormat:
    """Return ``"onnx"`` or ``"pt2"`` for the file at ``path``, judged by content.

    ``allow_pt2=False`` (the service setting that turns .pt2 uploads off) refuses a torch.export
    archive with :class:`UnsupportedModel` before any of its bytes are interpreted further.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        raise InvalidModel("The uploaded model could not be read.", hint=_UPLOAD_HINT) from e

    if size == 0:
        raise InvalidModel("The uploaded model is empty (0 bytes).", hint=_UPLOAD_HINT)

    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        raise InvalidModel(
            "The upload is a Python pickle (e.g. torch.save of a module or state_dict); pickles are never loaded "
            "because unpickling runs code.",
            hint="Export the model with torch.export.save (.pt2) or torch.onnx.export (.onnx) and upload that.",
        )
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08"):
        return _sniff_zip(path, allow_pt2=allow_pt2)
    if head[:2] == b"\x1f\x8b":
        raise InvalidModel("The upload is a gzip-compressed file, not a model.", hint=_ARCHIVE_HINT)
    if head[:3] == b"BZh" or head[:6] == b"\xfd7zXZ\x00" or head[:4] == b"\x28\xb5\x2f\xfd":
        raise InvalidModel("The upload is a compressed file (bzip2/xz/zstd), not a model.", hint=_UPLOAD_HINT)
    if len(head) >= 262 and head[257:262] == b"ustar":
        raise InvalidModel("The upload is a tar archive, not a model.", hint=_ARCHIVE_HINT)
    if head[:8] == b"\x89HDF\r\n\x1a\n" or head[:6] == b"\x93NUMPY":
        raise InvalidModel("The upload is an HDF5/NumPy data file, not a model.", hint=_UPLOAD_HINT)
    _sniff_onnx(path, size)
    return "onnx"


def _sniff_zip(path: Path, *, allow_pt2: bool) -> ModelFormat:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            pt2_marker = [n for n in names if n.count("/") == 1 and n.endswith("/archive_format")]
            marker_ok = False
            if len(pt2_marker) == 1:
                info = zf.getinfo(pt2_marker[0])
                marker_ok = info.file_size <= 16 and zf.read(info) == b"pt2"
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as e:
        raise InvalidModel("The upload starts like a zip file but is not a readable zip.", hint=_UPLOAD_HINT) from e

    base = {n.split("/", 1)[1] if "/" in n else n for n in names}
    if marker_ok:
        if not allow_pt2:
            raise UnsupportedModel(
                "PyTorch .pt2 uploads are turned off on this server.",
                hint="Upload the model as ONNX (torch.onnx.export(..., dynamo=True)) instead.",
                reason="pt2_disabled",
            )
        return "pt2"
    if "constants.pkl" in base or any(b.startswith("code/") for b in base):
        raise InvalidModel(
            "The upload is a TorchScript archive (torch.jit.save); TorchScript is not accepted.",
            hint="Export with torch.export.export + torch.export.save (.pt2), or to ONNX, and upload that.",
        )
    if "data.pkl" in base:
        raise InvalidModel(
            "The upload is a torch.save checkpoint (a pickle in a zip); checkpoints are never unpickled.",
            hint="Export with torch.export.export + torch.export.save (.pt2), or to ONNX, and upload that.",
        )
    if any(n.lower().endswith(".onnx") for n in names):
        raise InvalidModel("The upload is a zip archive holding an ONNX model.", hint=_ARCHIVE_HINT)
    raise InvalidModel(
        "The upload is a zip file but not a torch.export archive (no 'archive_format' = 'pt2' marker).",
        hint=_UPLOAD_HINT,
    )


def _sniff_onnx(path: Path, size: int) -> None:
    import onnx  # protobuf classes only; no ORT, no torch

    data = path.read_bytes()
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # google.protobuf.message.DecodeError, RecursionError inside upb
        other = _what_protobuf_is_it(data)
        if other:
            raise InvalidModel(
                f"The upload parses as protobuf but is not an ONNX ModelProto{other}.",
                hint="Save the whole model with onnx.save(model, path), not a single graph or tensor.",
            ) from e
        what = "truncated or corrupt protobuf" if _looks_like_protobuf(data) else "not a protobuf at all"
        raise InvalidModel(
            f"The upload is not an ONNX model: {what}.",
            hint="Check that the file was fully written and uploaded (binary mode), then upload it again. "
            + _UPLOAD_HINT,
        ) from e
    if _unknown_field_count(model) or not model.HasField("graph") or not model.opset_import or model.ir_version <= 0:
        other = _what_protobuf_is_it(data)
        raise InvalidModel(
            f"The upload parses as protobuf but is not an ONNX ModelProto{other}: it lacks an ir_version, "
            "opset_import or graph.",
            hint="Save the whole model with onnx.save(model, path), not a single graph or tensor.",
        )


def _unknown_field_count(msg) -> int:
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet

        return len(UnknownFieldSet(msg))
    except ImportError:  # older protobuf
        return len(msg.UnknownFields())


def _looks_like_protobuf(data: bytes) -> bool:
    # First byte of a ModelProto is a field key: field 1..26 with wire type 0 or 2.
    b = data[0]
    return (b & 7) in (0, 2) and 1 <= (b >> 3) <= 26


def _what_protobuf_is_it(data: bytes) -> str:
    import onnx

    for cls, label, ok in (
        (onnx.GraphProto, "GraphProto", lambda m: len(m.node) > 0),
        (onnx.TensorProto, "TensorProto", lambda m: m.data_type != 0 and (m.raw_data or m.dims)),
        (onnx.NodeProto, "NodeProto", lambda m: bool(m.op_type)),
    ):
        m = cls()
        try:
            m.ParseFromString(data)
        except Exception:
            continue
        if ok(m) and not _unknown_field_count(m):
            return f" (it looks like an onnx.{label} alone)"
    return ""


__all__ = ["ModelFormat", "sniff_model_format"]

