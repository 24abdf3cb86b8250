"""Extract a .zip / .tar(.gz) of one ONNX model plus its external data files, safely.

Only regular files, flat or under one folder, with plain names; no links, devices or folders
that escape; bounded member count, total size and compression ratio (counted while writing,
not trusted from headers). Files land flat in ``dest`` so every external-data ``location``
is a bare file name next to the model.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

from service.errors import QuantCompareError, UnsafeArchive

from .budgets import DEFAULT_BUDGETS, Budgets

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-+]{0,200}$")
_HINT = ("Upload a .zip or .tar(.gz) holding exactly one .onnx file and its external data files, as regular files "
         "(no links, no nested folders).")
_CHUNK = 1 << 20


def _refuse(msg: str) -> UnsafeArchive:
    return UnsafeArchive(f"The archive was refused: {msg}", hint=_HINT)


def safe_extract_archive(archive: Path, dest: Path, *, budgets: Budgets | None = None) -> Path:
    """Extract ``archive`` into the empty folder ``dest``; return the path of the one .onnx inside.

    The caller passes ``{p.name for p in dest.iterdir()} - {model.name}`` as ``allowed_data_files``
    to :func:`onnx_model_from_path`.
    """
    b = budgets or DEFAULT_BUDGETS
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise ValueError("safe_extract_archive needs an empty destination folder")
    with open(archive, "rb") as f:
        head = f.read(512)
    try:
        if head[:4] == b"PK\x03\x04":
            _extract_zip(archive, dest, b)
        elif head[:2] == b"\x1f\x8b" or (len(head) >= 262 and head[257:262] == b"ustar"):
            _extract_tar(archive, dest, b)
        else:
            raise _refuse("it is neither a zip nor a tar archive")
    except QuantCompareError:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError, NotImplementedError,
            RecursionError) as e:  # RecursionError: tarfile follows a chain of pax headers recursively
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        raise _refuse("it is corrupt or truncated") from e
    models = [p for p in dest.iterdir() if p.suffix.lower() == ".onnx"]
    if len(models) != 1:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True, exist_ok=True)
        raise _refuse(f"it must hold exactly one .onnx file (found {len(models)})")
    return models[0]


def _finder_metadata(name: str) -> bool:
    """What macOS adds when a folder is compressed in Finder (or tarred with its copyfile metadata):
    ``__MACOSX/...`` and ``._<file>`` AppleDouble resource forks, ``.DS_Store``. Never model data, and a
    ``._model.onnx`` beside ``model.onnx`` made the archive hold "2 .onnx files"; skipped, still counted."""
    parts = [p for p in name.split("/") if p]
    return bool(parts) and (parts[0] == "__MACOSX" or parts[-1] == ".DS_Store" or parts[-1].startswith("._"))


def _flat_name(name: str, seen: set[str]) -> str:
    if "\x00" in name or "\\" in name or name.startswith("/") or ":" in name:
        raise _refuse("a member name is absolute or contains forbidden characters")
    parts = [p for p in name.split("/") if p not in ("",)]
    if any(p in (".", "..") for p in parts) or not parts or len(parts) > 2:
        raise _refuse(f"member '{_shown(name)}' is nested more than one folder deep or has a '.' or '..' component")
    base = parts[-1]
    if not _NAME_RE.match(base):
        raise _refuse(f"member '{_shown(name)}' is not a plain file name (letters, digits, '_', '-', '.', '+')")
    if base in seen:
        raise _refuse("two members have the same file name")
    seen.add(base)
    return base


def _shown(name: str) -> str:
    """A member name as the refusal may quote it: printable ASCII, at most 80 characters."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in name)
    return clean if len(clean) <= 80 else clean[:77] + "..."


class _Budget:
    def __init__(self, b: Budgets, compressed_size: int):
        self.b = b
        self.total = 0
        self.count = 0
        self.compressed = max(compressed_size, 1)

    def member(self) -> None:
        self.count += 1
        if self.count > self.b.max_archive_members:
            raise self.b.refuse("max_archive_members", "archive members", self.count)

    def add(self, n: int) -> None:
        self.total += n
        if self.total > self.b.max_archive_bytes:
            raise self.b.refuse("max_archive_bytes", "archive uncompressed size", self.total, unit="bytes")
        if self.total > 1 << 20 and self.total > self.b.max_compression_ratio * self.compressed:
            raise self.b.refuse("max_compression_ratio", "archive compression ratio",
                                round(self.total / self.compressed, 1))


def _copy_bounded(src, out_path: Path, budget: _Budget) -> None:
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = src.read(_CHUNK)
            if not chunk:
                break
            budget.add(len(chunk))
            out.write(chunk)


def _extract_zip(archive: Path, dest: Path, b: Budgets) -> None:
    budget = _Budget(b, archive.stat().st_size)
    seen: set[str] = set()
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if len(infos) > b.max_archive_members:
            raise b.refuse("max_archive_members", "archive members", len(infos))
        if len({i.filename for i in infos}) != len(infos):
            raise _refuse("two members have the same name")
        for info in infos:
            if info.is_dir() and _finder_metadata(info.filename):
                continue
            if info.is_dir():
                _flat_name(info.filename.rstrip("/") + "/x", set())  # validate the folder name only
                continue
            mode = info.external_attr >> 16
            if mode and not (stat.S_ISREG(mode) or stat.S_IFMT(mode) == 0):
                raise _refuse("a member is a link or special file")
            if info.flag_bits & 0x1:
                raise _refuse("a member is encrypted")
            if _finder_metadata(info.filename):
                budget.member()
                continue
            name = _flat_name(info.filename, seen)
            budget.member()
            with zf.open(info) as src:
                _copy_bounded(src, dest / name, budget)


# A pax / GNU long-name header is read whole into memory by tarfile (TarInfo._proc_pax,
# _proc_gnulong: one read of the header's size) before a member is yielded: a gzipped tar of one
# 1 GB pax header is a few MB. Real ones hold a path and a few times; 64 KiB is generous.
_MAX_EXTENDED_HEADER_BYTES = 64 << 10
_EXTENDED_HEADERS = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                     tarfile.GNUTYPE_LONGLINK)


class _BoundedTarInfo(tarfile.TarInfo):
    """Every header counts against the member budget (directories and extended headers included,
    which tarfile also keeps in ``members``); an extended header is refused past its size bound
    before tarfile reads it."""

    def _proc_member(self, tf):
        tf.quantcompare_budget.member()
        if self.type in _EXTENDED_HEADERS and self.size > _MAX_EXTENDED_HEADER_BYTES:
            raise _refuse(f"a tar extended header (pax or GNU long name) of {self.size} bytes "
                          f"(at most {_MAX_EXTENDED_HEADER_BYTES})")
        return super()._proc_member(tf)


def _extract_tar(archive: Path, dest: Path, b: Budgets) -> None:
    budget = _Budget(b, archive.stat().st_size)
    seen: set[str] = set()

    class _BoundedTarFile(tarfile.TarFile):  # the budget is there before open() reads the first header
        tarinfo = _BoundedTarInfo
        quantcompare_budget = budget

    with _BoundedTarFile.open(archive, mode="r:*") as tf:
        for m in tf:  # streaming: never tf.getmembers() on a hostile header list first
            if _finder_metadata(m.name):
                continue  # counted by _BoundedTarInfo; never extracted
            if m.isdir():
                _flat_name(m.name.rstrip("/") + "/x", set())
                continue
            if not m.isreg():
                raise _refuse("a member is a link, device or other special file")
            name = _flat_name(m.name, seen)  # counted by _BoundedTarInfo
            src = tf.extractfile(m)
            if src is None:
                raise _refuse("a member could not be read")
            with src:
                _copy_bounded(src, dest / name, budget)


__all__ = ["safe_extract_archive"]
