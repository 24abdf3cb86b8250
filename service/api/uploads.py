"""Receiving a comparison request body without holding it in memory.

Starlette's ``request.form()`` spools parts to temp files but bounds nothing; here the request
stream goes through python-multipart's streaming parser chunk by chunk, straight into the
staged job folder, with a size limit per part (413 as soon as it is crossed, before the rest
is read). Memory use is one chunk, whatever the upload size. Filenames are never used as
paths: files get fixed names, and the client's name survives only, sanitized, as a label.
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


async def receive_form(request: Request, staged: Path, *, max_model_bytes: int, max_calibration_bytes: int,
                       allow_pt2: bool, idle_timeout_s: float, min_bytes_per_s: float) -> ReceivedForm:
    _, params = parse_options_header(request.headers.get("content-type", ""))
    boundary = params.get(b"boundary")
    if not boundary or len(boundary) > 200:
        raise InvalidRequest("multipart body without a boundary", hint="let your HTTP client build the multipart body")
    declared = declared_length(request)
    ceiling = max_model_bytes + max_calibration_bytes + MAX_OPTIONS_BYTES + 64 * 1024
    if declared is not None and declared > ceiling:
        raise PayloadTooLarge(
            f"the upload is {declared / _MIB:.1f} MiB; this server takes models up to "
            f"{max_model_bytes / _MIB:g} MiB and calibration data up to {max_calibration_bytes / _MIB:g} MiB",
            hint="raise QUANTCOMPARE_MAX_UPLOAD_MB on the server, or upload a smaller model")

    input_dir = staged / "input"
    input_dir.mkdir(exist_ok=True)
    parts: dict[str, _Part] = {}
    state: dict[str, Any] = {"part": None, "hname": b"", "hvalue": b"", "headers": {}, "ended": False}

    def on_part_begin():
        state["headers"] = {}

    def on_header_field(data, start, end):
        state["hname"] += data[start:end]

    def on_header_value(data, start, end):
        state["hvalue"] += data[start:end]

    def on_header_end():
        state["headers"][state["hname"].lower()] = state["hvalue"]
        state["hname"], state["hvalue"] = b"", b""

    def on_headers_finished():
        name, filename = _content_disposition(state["headers"].get(b"content-disposition", b""))
        if name not in ("model", "calibration", "options"):
            raise InvalidRequest("unexpected form field; the fields are model, options and calibration",
                                 hint="curl -F model=@net.onnx -F 'options={...}' -F calibration=@calib.npz")
        if name in parts:
            raise InvalidRequest(f"the form field {name!r} appears twice")
        if name == "options":
            part = _Part(name, filename, MAX_OPTIONS_BYTES, buffer=bytearray())
        else:
            limit = max_model_bytes if name == "model" else max_calibration_bytes
            path = input_dir / ("model.upload" if name == "model" else "calibration.npz")
            part = _Part(name, filename, limit, path=path, handle=open(path, "wb"))
        parts[name] = part
        state["part"] = part

    def on_part_data(data, start, end):
        part: _Part = state["part"]
        chunk = data[start:end]
        part.size += len(chunk)
        if part.size > part.limit:
            what = {"model": "model", "calibration": "calibration data", "options": "options"}[part.field]
            raise PayloadTooLarge(
                f"the {what} is larger than this server's limit of {part.limit / _MIB:g} MiB",
                hint="upload a smaller file, or raise the limit on the server (see docs/settings.md)")
        if part.buffer is not None:
            part.buffer += chunk
        else:
            part.sha256.update(chunk)
            part.handle.write(chunk)

    def on_part_end():
        part = state["part"]
        if part is not None and part.handle is not None:
            part.handle.close()
            part.handle = None
        state["part"] = None

    def on_end():  # the closing boundary: only now is the form whole
        state["ended"] = True

    parser = MultipartParser(boundary, {
        "on_part_begin": on_part_begin, "on_header_field": on_header_field, "on_header_value": on_header_value,
        "on_header_end": on_header_end, "on_headers_finished": on_headers_finished,
        "on_part_data": on_part_data, "on_part_end": on_part_end, "on_end": on_end,
    }, max_header_count=16)
    received = 0
    try:
        async for chunk in paced(request.stream(), idle_timeout_s=idle_timeout_s, min_bytes_per_s=min_bytes_per_s):
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
        for part in parts.values():
            if part.handle is not None:
                part.handle.close()
    refuse_short_body(received, declared)
    if not state["ended"]:
        # python-multipart's finalize() does not check this: a form cut inside a part would otherwise
        # run on what arrived (a cut options part: default options; a cut calibration part: a stub)
        cut = state["part"].field if state["part"] is not None else None
        raise IncompleteUpload(("the form ended inside its " + repr(cut) + " part" if cut else
                                "the form ended before its closing boundary") + "; nothing was run",
                               hint="the upload was cut (a proxy's limit or a dropped connection): send it again")

    model = parts.get("model")
    if model is None or model.path is None:
        raise InvalidRequest("the form has no 'model' file", hint="curl -F model=@net.onnx ...")
    if model.size == 0:
        raise InvalidModel("the uploaded model is empty (0 bytes)", hint="upload an .onnx or .pt2 file")
    # A first look at the bytes, to name the file; the worker sniffs and checks it for real.
    with open(model.path, "rb") as f:
        head = f.read(4)
    kind = "pt2" if head in (b"PK\x03\x04", b"PK\x05\x06") else "onnx"
    if kind == "pt2" and not allow_pt2:
        raise UnsupportedModel("PyTorch .pt2 uploads are turned off on this server",
                               hint="upload the model as ONNX (torch.onnx.export(..., dynamo=True)) instead",
                               reason="pt2_disabled")
    final = input_dir / f"model.{kind}"
    model.path.rename(final)
    model.path = final

    options_raw = parts["options"].buffer if "options" in parts else None
    calibration = parts.get("calibration")
    if calibration is not None and calibration.size == 0 and calibration.filename:
        # an HTML form sends an unchosen file field as an empty part without a file name; a named empty
        # file was meant as data, and the job would otherwise run on generated samples instead
        raise InvalidCalibration("the uploaded calibration file is empty (0 bytes)",
                                 hint="upload the .npz written by numpy.savez(path, **{input_name: array}), or leave "
                                      "the calibration field out to use generated samples")
    return ReceivedForm(
        model=ReceivedFile(final, model.size, model.sha256.hexdigest(), model.filename),
        calibration=(ReceivedFile(calibration.path, calibration.size, calibration.sha256.hexdigest(), calibration.filename)
                     if calibration is not None and calibration.size > 0 else None),
        options=parse_options(bytes(options_raw) if options_raw is not None else None),
    )


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
