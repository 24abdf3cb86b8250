"""Receiving a comparison request body without holding it in memory.

Starlette's ``request.form()`` spools parts to temp files but bounds nothing; here the request
stream goes through python-multipart's streaming parser chunk by chunk, straight into the
staged job folder, with a size limit per part (413 as soon as it is crossed, before the rest
is read). Memory use is one chunk, whatever the upload size. Filenames are never used as
paths: files get fixed names, and the client's name survives only, sanitized, as a label.

``Intake`` receives one form: ``model``, ``options``, ``calibration`` and the quantized files brought
beside the model (``artifact.<name>``, each to ``input/artifact.<name>.onnx``); ``receive_form`` is its
one-call form.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import Request
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from service.errors import (IncompleteUpload, InvalidCalibration, InvalidModel, InvalidOptions, InvalidRequest,
                            PayloadTooLarge, UnsupportedModel, UploadTooSlow)
from service.schemas.options import brought_name_refusal

MAX_OPTIONS_BYTES = 64 * 1024
MAX_JSON_BODY_BYTES = 256 * 1024
_MIB = 1024 * 1024


@dataclass
class _Part:
    field: str
    filename: str | None
    limit: int
    path: Path | None = None
    size: int = 0
    sha256: Any = field(default_factory=hashlib.sha256)
    buffer: bytearray | None = None
    handle: Any = None


@dataclass(frozen=True)
class ReceivedFile:
    path: Path
    size: int
    sha256: str
    filename: str | None


@dataclass(frozen=True)
class ReceivedForm:
    model: ReceivedFile
    calibration: ReceivedFile | None
    options: dict[str, Any]
    artifacts: dict[str, ReceivedFile] = field(default_factory=dict)  # brought files: artifact.<name> -> file


def display_name(filename: str | None, default: str = "model") -> str:
    """A label from a client's filename: last path segment, no extension, safe characters only."""
    if not filename:
        return default
    base = re.split(r"[\\/]", filename)[-1]
    base = re.sub(r"\.(onnx|pt2|npz)$", "", base, flags=re.I)
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("._-")[:64]
    return base or default


def parse_options(raw: bytes | str | None) -> dict[str, Any]:
    if raw is None or (isinstance(raw, (bytes, str)) and not raw.strip()):
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # nesting deeper than json can parse
        raise InvalidOptions(f"options is not valid JSON ({e.__class__.__name__})",
                             hint='send options as a JSON object, e.g. {"calibration_samples": 32}') from None
    if not isinstance(value, dict):
        raise InvalidOptions("options must be a JSON object", hint='e.g. {"calibration_samples": 32}')
    return value


def _content_disposition(raw: bytes) -> tuple[str | None, str | None]:
    _, params = parse_options_header(raw)
    name = params.get(b"name")
    filename = params.get(b"filename")
    return (name.decode("utf-8", "replace") if name is not None else None,
            filename.decode("utf-8", "replace") if filename is not None else None)


async def paced(stream: AsyncIterator[bytes], *, idle_timeout_s: float, min_bytes_per_s: float) -> AsyncIterator[bytes]:
    """``stream``'s chunks, or UploadTooSlow once no chunk came for ``idle_timeout_s``, or once,
    ``idle_timeout_s`` after the start, the bytes so far average less than ``min_bytes_per_s``: a
    stalled or trickling client (slowloris) would otherwise hold its upload slot for ever."""
    loop = asyncio.get_running_loop()
    start, received = loop.time(), 0
    chunks = stream.__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(chunks.__anext__(), timeout=idle_timeout_s)
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            raise UploadTooSlow(f"the upload sent nothing for {idle_timeout_s:g} s after {received} bytes",
                                hint="retry on a steadier connection; the server drops stalled uploads "
                                     "(QUANTCOMPARE_UPLOAD_IDLE_TIMEOUT_S)") from None
        received += len(chunk)
        elapsed = loop.time() - start
        if min_bytes_per_s and elapsed > idle_timeout_s and received < min_bytes_per_s * elapsed:
            raise UploadTooSlow(f"the upload averaged {received / elapsed / 1024:.2f} KiB/s over {elapsed:.0f} s, "
                                f"below the server's minimum of {min_bytes_per_s / 1024:g} KiB/s",
                                hint="retry on a faster connection, or ask the operator to lower "
                                     "QUANTCOMPARE_UPLOAD_MIN_KIB_S")
        yield chunk


def declared_length(request: Request) -> int | None:
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


def refuse_short_body(received: int, declared: int | None) -> None:
    """IncompleteUpload when the body ended before its Content-Length: the client half-closed the
    connection mid-body (the server's protocol then ends the body where it stopped)."""
    if declared is not None and received < declared:
        raise IncompleteUpload(f"the body ended after {received} of the {declared} bytes its Content-Length "
                               "announced; nothing was run",
                               hint="the upload was cut (a proxy's limit or a dropped connection): send it again")


# Brought quantized files a form may carry (artifact.<name> parts), each within the model's size limit.
MAX_BROUGHT_FILES = 8
_FIELDS = "model, options, calibration and artifact.<name>"


@dataclass(frozen=True)
class IntakeLimits:
    max_model_bytes: int  # the model, and each brought file
    max_calibration_bytes: int
    allow_pt2: bool
    idle_timeout_s: float
    min_bytes_per_s: float


class Intake:
    """One multipart comparison form, streamed part by part into the staged job folder.

    Parts: ``model`` (.onnx or .pt2), ``options`` (JSON), ``calibration`` (.npz) and any number (up to
    :data:`MAX_BROUGHT_FILES`) of ``artifact.<name>``: a quantized ONNX file of the same model, compared as
    ``artifacts.<name>``. Each file part has its limit, crossed -> 413 at once; the form must end with its
    closing boundary. The parser's callbacks are this object's methods; ``receive`` drives them.
    """

    def __init__(self, staged: Path, limits: IntakeLimits):
        self.limits = limits
        self.input_dir = staged / "input"
        self.parts: dict[str, _Part] = {}
        self.part: _Part | None = None
        self.ended = False
        self._hname, self._hvalue, self._headers = b"", b"", {}

    # -- python-multipart's callbacks
    def on_part_begin(self):
        self._headers = {}

    def on_header_field(self, data, start, end):
        self._hname += data[start:end]

    def on_header_value(self, data, start, end):
        self._hvalue += data[start:end]

    def on_header_end(self):
        self._headers[self._hname.lower()] = self._hvalue
        self._hname, self._hvalue = b"", b""

    def on_headers_finished(self):
        name, filename = _content_disposition(self._headers.get(b"content-disposition", b""))
        if name in self.parts:
            raise InvalidRequest(f"the form field {name!r} appears twice")
        self.part = self.parts[name] = self._new_part(name, filename)

    def on_part_data(self, data, start, end):
        part = self.part
        chunk = data[start:end]
        part.size += len(chunk)
        if part.size > part.limit:
            what = {"model": "model", "calibration": "calibration data", "options": "options"}.get(
                part.field, f"brought file {part.field}")
            raise PayloadTooLarge(
                f"the {what} is larger than this server's limit of {part.limit / _MIB:g} MiB",
                hint="upload a smaller file, or raise the limit on the server (see docs/settings.md)")
        if part.buffer is not None:
            part.buffer += chunk
        else:
            part.sha256.update(chunk)
            part.handle.write(chunk)

    def on_part_end(self):
        if self.part is not None and self.part.handle is not None:
            self.part.handle.close()
            self.part.handle = None
        self.part = None

    def on_end(self):  # the closing boundary: only now is the form whole
        self.ended = True

    def _new_part(self, name: str | None, filename: str | None) -> _Part:
        limits = self.limits
        if name == "options":
            return _Part(name, filename, MAX_OPTIONS_BYTES, buffer=bytearray())
        if name in ("model", "calibration"):
            path = self.input_dir / ("model.upload" if name == "model" else "calibration.npz")
            limit = limits.max_model_bytes if name == "model" else limits.max_calibration_bytes
            return _Part(name, filename, limit, path=path, handle=open(path, "wb"))
        if name and name.startswith("artifact."):
            brought = name[len("artifact."):]
            why = brought_name_refusal(brought)
            if why:
                raise InvalidRequest(f"the form field {name!r} does not name a brought file: {why}",
                                     hint="curl -F artifact.mine=@mine_int8.onnx ...")
            if sum(p.startswith("artifact.") for p in self.parts) >= MAX_BROUGHT_FILES:
                raise InvalidRequest(f"a form brings at most {MAX_BROUGHT_FILES} quantized files",
                                     hint="compare the others in a second request")
            path = self.input_dir / f"artifact.{brought}.onnx"
            return _Part(name, filename, limits.max_model_bytes, path=path, handle=open(path, "wb"))
        raise InvalidRequest(f"unexpected form field; the fields are {_FIELDS}",
                             hint="curl -F model=@net.onnx -F 'options={...}' -F calibration=@calib.npz "
                                  "-F artifact.mine=@mine_int8.onnx")

    # -- the request
    def refuse_declared_length(self, declared: int | None) -> None:
        limits = self.limits
        ceiling = (limits.max_model_bytes * (1 + MAX_BROUGHT_FILES) + limits.max_calibration_bytes
                   + MAX_OPTIONS_BYTES + 64 * 1024)
        if declared is not None and declared > ceiling:
            raise PayloadTooLarge(
                f"the upload is {declared / _MIB:.1f} MiB; this server takes models (and each brought file) up to "
                f"{limits.max_model_bytes / _MIB:g} MiB and calibration data up to "
                f"{limits.max_calibration_bytes / _MIB:g} MiB",
                hint="raise QUANTCOMPARE_MAX_UPLOAD_MB on the server, or upload a smaller model")

    async def receive(self, request: Request) -> ReceivedForm:
        _, params = parse_options_header(request.headers.get("content-type", ""))
        boundary = params.get(b"boundary")
        if not boundary or len(boundary) > 200:
            raise InvalidRequest("multipart body without a boundary", hint="let your HTTP client build the multipart body")
        declared = declared_length(request)
        self.refuse_declared_length(declared)
        self.input_dir.mkdir(exist_ok=True)
        received = await self._parse(request, boundary)
        refuse_short_body(received, declared)
        if not self.ended:
            # python-multipart's finalize() does not check this: a form cut inside a part would otherwise
            # run on what arrived (a cut options part: default options; a cut calibration part: a stub)
            cut = self.part.field if self.part is not None else None
            raise IncompleteUpload(("the form ended inside its " + repr(cut) + " part" if cut else
                                    "the form ended before its closing boundary") + "; nothing was run",
                                   hint="the upload was cut (a proxy's limit or a dropped connection): send it again")
        return self._form()

    async def _parse(self, request: Request, boundary: bytes) -> int:
        callbacks = {name: getattr(self, name) for name in (
            "on_part_begin", "on_header_field", "on_header_value", "on_header_end", "on_headers_finished",
            "on_part_data", "on_part_end", "on_end")}
        parser = MultipartParser(boundary, callbacks, max_header_count=16)
        received = 0
        limits = self.limits
        try:
            async for chunk in paced(request.stream(), idle_timeout_s=limits.idle_timeout_s,
                                     min_bytes_per_s=limits.min_bytes_per_s):
                if chunk:
                    received += len(chunk)
                    parser.write(chunk)
            parser.finalize()
        except (PayloadTooLarge, InvalidRequest, UploadTooSlow):
            raise
        except Exception as e:  # python-multipart's MultipartParseError and friends
            if isinstance(e, ClientDisconnect):
                raise
            raise InvalidRequest("the multipart body is malformed",
                                 hint="let your HTTP client build the multipart body (curl -F, requests files=)") from None
        finally:
            for part in self.parts.values():
                if part.handle is not None:
                    part.handle.close()
        return received

    def _form(self) -> ReceivedForm:
        model = self.parts.get("model")
        if model is None or model.path is None:
            raise InvalidRequest("the form has no 'model' file", hint="curl -F model=@net.onnx ...")
        if model.size == 0:
            raise InvalidModel("the uploaded model is empty (0 bytes)", hint="upload an .onnx or .pt2 file")
        # A first look at the bytes, to name the file; the worker sniffs and checks it for real.
        with open(model.path, "rb") as f:
            head = f.read(4)
        kind = "pt2" if head in (b"PK\x03\x04", b"PK\x05\x06") else "onnx"
        if kind == "pt2" and not self.limits.allow_pt2:
            raise UnsupportedModel("PyTorch .pt2 uploads are turned off on this server",
                                   hint="upload the model as ONNX (torch.onnx.export(..., dynamo=True)) instead",
                                   reason="pt2_disabled")
        final = self.input_dir / f"model.{kind}"
        model.path.rename(final)
        model.path = final

        options_raw = self.parts["options"].buffer if "options" in self.parts else None
        calibration = self.parts.get("calibration")
        if calibration is not None and calibration.size == 0 and calibration.filename:
            # an HTML form sends an unchosen file field as an empty part without a file name; a named empty
            # file was meant as data, and the job would otherwise run on generated samples instead
            raise InvalidCalibration("the uploaded calibration file is empty (0 bytes)",
                                     hint="upload the .npz written by numpy.savez(path, **{input_name: array}), or "
                                          "leave the calibration field out to use generated samples")
        return ReceivedForm(
            model=_received(model),
            calibration=_received(calibration) if calibration is not None and calibration.size > 0 else None,
            options=parse_options(bytes(options_raw) if options_raw is not None else None),
            artifacts=self._brought(),
        )

    def _brought(self) -> dict[str, ReceivedFile]:
        out = {}
        for field_name, part in self.parts.items():
            if not field_name.startswith("artifact."):
                continue
            if part.size == 0:
                raise InvalidModel(f"the brought file {field_name!r} is empty (0 bytes)",
                                   hint="bring a quantized .onnx file of the uploaded model")
            out[field_name[len("artifact."):]] = _received(part)
        return out


def _received(part: _Part) -> ReceivedFile:
    return ReceivedFile(part.path, part.size, part.sha256.hexdigest(), part.filename)


async def receive_form(request: Request, staged: Path, *, max_model_bytes: int, max_calibration_bytes: int,
                       allow_pt2: bool, idle_timeout_s: float, min_bytes_per_s: float) -> ReceivedForm:
    """The form of ``request`` received into ``staged`` (``Intake``)."""
    limits = IntakeLimits(max_model_bytes=max_model_bytes, max_calibration_bytes=max_calibration_bytes,
                          allow_pt2=allow_pt2, idle_timeout_s=idle_timeout_s, min_bytes_per_s=min_bytes_per_s)
    return await Intake(staged, limits).receive(request)


async def receive_json(request: Request, *, idle_timeout_s: float, min_bytes_per_s: float) -> dict[str, Any]:
    """The JSON body, read under the same pace as an upload: a body shorter than its Content-Length
    was otherwise waited for without limit."""
    body = bytearray()
    async for chunk in paced(request.stream(), idle_timeout_s=idle_timeout_s, min_bytes_per_s=min_bytes_per_s):
        body += chunk
        if len(body) > MAX_JSON_BODY_BYTES:
            raise PayloadTooLarge(f"a JSON body is limited to {MAX_JSON_BODY_BYTES // 1024} KiB",
                                  hint="upload models as multipart (curl -F model=@net.onnx)")
    refuse_short_body(len(body), declared_length(request))
    try:
        value = json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidRequest("the body is not valid JSON", hint='send {"example": "conv_relu", "options": {}}') from None
    if not isinstance(value, dict):
        raise InvalidRequest("the JSON body must be an object", hint='send {"example": "conv_relu", "options": {}}')
    return value
