"""Files sent to a client: a Range the file cannot serve is a problem+json, and whatever the
download holds (its job's pin, a scratch folder) is released once the body is sent or the client left.

Starlette's FileResponse answers a malformed Range with a text/plain 400 and a range past the end
with an empty 416: clients that switch on ``code`` got nothing to read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

from starlette.datastructures import Headers
from starlette.responses import FileResponse, MalformedRangeHeader, StreamingResponse
from starlette.responses import RangeNotSatisfiable as _StarletteRangeNotSatisfiable
from starlette.types import Receive, Scope, Send

from service.api.errors import problem_response
from service.errors import ArtifactGone, RangeNotSatisfiable, shown
from service.schemas.api import problem_from_error


class DownloadResponse(FileResponse):
    def __init__(self, path: Path, *, filename: str | None = None, media_type: str | None = "application/octet-stream",
                 headers: dict[str, str] | None = None, release: Iterable[Callable[[], object]] = ()):
        try:
            stat = os.stat(path)  # now, in the handler: a file gone is a 410 here, not a 500 mid-response
        except FileNotFoundError:
            raise ArtifactGone(f"{Path(path).name} is no longer on disk",
                               hint="the job was evicted or expired: submit the model again") from None
        super().__init__(path, filename=filename, media_type=media_type, headers=headers, stat_result=stat)
        self._release = list(release)

    def _range_problem(self, scope: Scope):
        headers = Headers(scope=scope)
        http_range, if_range = headers.get("range"), headers.get("if-range")
        if (http_range is None or scope["method"].upper() not in ("GET", "HEAD")
                or (if_range is not None and not self._should_use_range(if_range))):
            return None
        size = self.stat_result.st_size
        try:
            self._parse_range_header(http_range, size)
        except (MalformedRangeHeader, _StarletteRangeNotSatisfiable):
            error = RangeNotSatisfiable(f"the Range header {shown(http_range)!r} does not name bytes of this "
                                        f"{size}-byte file",
                                        hint=f"ask for 'bytes=START-END' with START below {size}, or send no Range")
            return problem_response(problem_from_error(error), error.status, {"Content-Range": f"bytes */{size}"})
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            refusal = self._range_problem(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            await super().__call__(scope, receive, send)
        finally:
            for release in self._release:
                release()


class StreamedDownload(StreamingResponse):
    """A file streamed from a bucket (``QUANTCOMPARE_STORAGE_URL``): its size known up front, no Range
    (the whole file, 200), and what the download holds released once the body is sent or the client left."""

    def __init__(self, chunks: Iterator[bytes], *, size: int, filename: str,
                 release: Iterable[Callable[[], object]] = ()):
        super().__init__(chunks, media_type="application/octet-stream", headers={
            "Content-Length": str(size), "Content-Disposition": f'attachment; filename="{filename}"'})
        self._release = list(release)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for release in self._release:
                release()
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()  # a client gone mid-file: the bucket's connection goes back at once
