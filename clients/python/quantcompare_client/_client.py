"""``Client`` and ``AsyncClient``: the HTTP API of quantcompare as Python calls.

Both share one request/response core (``_Core``) so the sync and async twins cannot drift:
the I/O methods only send what ``_Core`` builds and hand the response back to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Mapping, Optional, Tuple, Union

import httpx

from ._exceptions import (
    Busy,
    ComparisonFailed,
    ConnectError,
    QuantCompareError,
    ServerError,
    Timeout,
    TransportError,
    WaitTimeout,
    api_error_from_problem,
)
from ._progress import ProgressArg, reporter_from_arg
from ._report import ArtifactLink, Example, Job, Report
from ._torch_export import is_torch_module, pt2_from_module

__all__ = ["Client", "AsyncClient", "ModelInput", "DEFAULT_TIMEOUT"]

ModelInput = Union[str, "os.PathLike[str]", bytes, bytearray, IO[bytes]]
CalibrationInput = Union[str, "os.PathLike[str]", bytes, bytearray, IO[bytes], None]
TimeoutArg = Union[float, httpx.Timeout, None]

# Uploads of large models need write time; connect should fail fast when nothing listens.
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
# The POST holds the request this long so a cached or tiny comparison answers in one round trip;
# after that the client polls, which keeps the progress display moving.
_POST_WAIT_SECONDS = 2
_EXAMPLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")
_MODEL_SUFFIXES = (".onnx", ".pt2")
_BUSY_RETRIES = 3
_MAX_RETRY_SLEEP = 30.0


class _Core:
    """Builds requests and reads responses; no I/O here."""

    def __init__(self, base_url: str, *, token: Optional[str], user_agent: str) -> None:
        if not base_url or not re.match(r"^https?://", base_url):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.headers = {"Accept": "application/json", "User-Agent": user_agent}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    # -- request building -----------------------------------------------------------------------

    @staticmethod
    def options_json(options: Union[Mapping[str, Any], str, None]) -> Dict[str, Any]:
        if options is None:
            return {}
        if isinstance(options, str):
            try:
                options = json.loads(options)
            except json.JSONDecodeError as e:
                raise ValueError(f"options is not valid JSON: {e}") from None
        if not isinstance(options, Mapping):
            raise ValueError(f"options must be a JSON object, got {type(options).__name__}")
        return dict(options)

    @staticmethod
    def model_source(model: ModelInput) -> Tuple[str, Any]:
        """``("example", name)``, ``("path", Path)``, ``("bytes", bytes)`` or ``("file", IO)``."""
        if isinstance(model, (bytes, bytearray)):
            return "bytes", bytes(model)
        if hasattr(model, "read"):
            return "file", model
        if isinstance(model, os.PathLike):
            path = Path(model)
            if not path.is_file():
                raise FileNotFoundError(f"model file not found: {path}")
            return "path", path
        if isinstance(model, str):
            path = Path(model).expanduser()
            if path.is_file():
                return "path", path
            looks_like_path = os.sep in model or "/" in model or model.lower().endswith(_MODEL_SUFFIXES)
            if not looks_like_path and _EXAMPLE_NAME.match(model):
                return "example", model
            raise FileNotFoundError(f"model file not found: {model} (and it is not an example name)")
        raise TypeError(f"model must be a path, bytes, a binary file or an example name, got {type(model).__name__}")

    @staticmethod
    def filename_for(data_head: bytes, fallback: str = "model") -> str:
        # The server sniffs the format itself; the name only helps its log and the report title.
        return f"{fallback}.pt2" if data_head[:4] == b"PK\x03\x04" else f"{fallback}.onnx"

    def compare_request(
        self,
        model: ModelInput,
        options: Union[Mapping[str, Any], str, None],
        calibration: CalibrationInput,
        wait_seconds: Optional[int],
        filename: Optional[str],
        example_inputs: Any = None,
        dynamic_shapes: Any = None,
        artifacts: Optional[Mapping[str, Any]] = None,
    ) -> Tuple[Dict[str, Any], List[Any]]:
        """kwargs for ``httpx.Client.request`` plus the files it opened (the caller closes them)."""
        opts = self.options_json(options)
        if is_torch_module(model):
            filename = filename or f"{type(model).__name__}.pt2"
            model = pt2_from_module(model, example_inputs, dynamic_shapes)
        elif example_inputs is not None or dynamic_shapes is not None:
            raise TypeError("example_inputs and dynamic_shapes go with a torch.nn.Module, "
                            f"not with a {type(model).__name__}")
        kind, value = self.model_source(model)
        params = {"wait": str(wait_seconds)} if wait_seconds else {}
        if kind == "example":
            if calibration is not None or artifacts:
                raise ValueError("calibration data and brought files can only be sent with an uploaded model, "
                                 "not with an example")
            return {"method": "POST", "url": "/v1/comparisons", "params": params,
                    "json": {"example": value, "options": opts}}, []
        opened: List[Any] = []
        if kind == "path":
            fh = open(value, "rb")
            opened.append(fh)
            upload = (filename or value.name, fh, "application/octet-stream")
        elif kind == "bytes":
            upload = (filename or self.filename_for(value), value, "application/octet-stream")
        else:
            upload = (filename or os.path.basename(getattr(value, "name", "") or "") or "model.onnx", value,
                      "application/octet-stream")
        files: Dict[str, Any] = {"model": upload}
        if calibration is not None:
            if isinstance(calibration, (bytes, bytearray)):
                files["calibration"] = ("calibration.npz", bytes(calibration), "application/octet-stream")
            elif hasattr(calibration, "read"):
                files["calibration"] = ("calibration.npz", calibration, "application/octet-stream")
            else:
                cpath = Path(calibration)
                if not cpath.is_file():
                    for fh in opened:
                        fh.close()
                    raise FileNotFoundError(f"calibration file not found: {cpath}")
                ch = open(cpath, "rb")
                opened.append(ch)
                files["calibration"] = (cpath.name, ch, "application/octet-stream")
        for name, brought in (artifacts or {}).items():  # artifact.<name>: compared as artifacts.<name>
            if isinstance(brought, (bytes, bytearray)):
                files[f"artifact.{name}"] = (f"{name}.onnx", bytes(brought), "application/octet-stream")
            elif hasattr(brought, "read"):
                files[f"artifact.{name}"] = (f"{name}.onnx", brought, "application/octet-stream")
            else:
                bpath = Path(brought)
                if not bpath.is_file():
                    for fh in opened:
                        fh.close()
                    raise FileNotFoundError(f"brought file not found: {bpath}")
                bh = open(bpath, "rb")
                opened.append(bh)
                files[f"artifact.{name}"] = (bpath.name, bh, "application/octet-stream")
        data = {"options": json.dumps(opts)}
        return {"method": "POST", "url": "/v1/comparisons", "params": params, "files": files, "data": data}, opened

    @staticmethod
    def artifact_name(artifact: str, level: Optional[str]) -> str:
        name = artifact if artifact.endswith(".onnx") else f"{artifact}.{level}.onnx" if level else f"{artifact}.onnx"
        if "/" in name or "\\" in name or name.startswith("."):
            raise ValueError(f"artifact name {artifact!r} must be a plain file name like 'ort_qdq.all.onnx'")
        return name

    # -- response reading -----------------------------------------------------------------------

    def url(self, path: str) -> str:
        return path if path.startswith("http") else self.base_url + path

    @staticmethod
    def check(response: httpx.Response) -> httpx.Response:
        if response.status_code < 400:
            return response
        try:
            body: Any = response.json()
        except Exception:
            body = response.text
        raise api_error_from_problem(
            response.status_code, body, url=str(response.request.url), retry_after=response.headers.get("Retry-After")
        )

    @staticmethod
    def json_of(response: httpx.Response) -> Any:
        try:
            return response.json()
        except Exception:
            raise ServerError(
                f"expected JSON, got {response.headers.get('content-type', 'no content type')}",
                url=str(response.request.url), status=response.status_code,
            ) from None

    def transport_error(self, e: httpx.HTTPError, method: str, url: str) -> TransportError:
        if isinstance(e, httpx.TimeoutException):
            return Timeout(f"{method} {url} timed out ({type(e).__name__}); raise Client(timeout=...) "
                           "for large uploads", url=url)
        if isinstance(e, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return ConnectError(f"cannot reach quantcompare at {url}: {e or type(e).__name__}", url=url)
        return TransportError(f"{method} {url} failed: {type(e).__name__}: {e}", url=url)

    def report_from_job(self, job: Job) -> Report:
        if job.status == "failed":
            p = job.error or {}
            raise ComparisonFailed(
                str(p.get("detail") or p.get("title") or "the comparison failed"),
                url=self.url(f"/v1/comparisons/{job.id}"), job_id=job.id, code=p.get("code"), hint=p.get("hint"),
                problem=p,
            )
        if job.report is None:
            raise ServerError(f"job {job.id} succeeded without a report", url=self.url(f"/v1/comparisons/{job.id}"),
                              status=200)
        return job.report


def _poll_delays():
    delay = 0.25
    while True:
        yield delay
        delay = min(delay * 1.5, 2.0)


def _user_agent() -> str:
    from . import __version__

    return f"quantcompare-client/{__version__} httpx/{httpx.__version__}"


class Client:
    """Synchronous client.

    >>> with Client("http://127.0.0.1:8000") as qc:
    ...     report = qc.compare("conv_relu", options={"gates": [...]})
    ...     report.summary()
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout: TimeoutArg = DEFAULT_TIMEOUT,
        token: Optional[str] = None,
        transport: Optional[httpx.BaseTransport] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._core = _Core(base_url, token=token, user_agent=_user_agent())
        self._http = httpx.Client(base_url=self._core.base_url, timeout=timeout, transport=transport,
                                  headers={**self._core.headers, **(headers or {})})

    @property
    def base_url(self) -> str:
        return self._core.base_url

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"<Client {self.base_url}>"

    # -- plumbing -------------------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = self._core.url(path)
        for attempt in range(_BUSY_RETRIES + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as e:
                raise self._core.transport_error(e, method, url) from e
            try:
                return self._core.check(response)
            except Busy as e:
                if attempt == _BUSY_RETRIES:
                    raise
                time.sleep(min(2.0 if e.retry_after is None else e.retry_after, _MAX_RETRY_SLEEP))
                for part in (kwargs.get("files") or {}).values():
                    if hasattr(part[1], "seek"):
                        part[1].seek(0)
        raise AssertionError("unreachable")  # pragma: no cover

    def _json(self, path: str) -> Any:
        return self._core.json_of(self._send("GET", path))

    # -- API --------------------------------------------------------------------------------------

    def submit(
        self,
        model: ModelInput,
        *,
        options: Union[Mapping[str, Any], str, None] = None,
        calibration: CalibrationInput = None,
        filename: Optional[str] = None,
        wait_seconds: Optional[int] = None,
        example_inputs: Any = None,
        dynamic_shapes: Any = None,
        artifacts: Optional[Mapping[str, Any]] = None,
    ) -> Job:
        """POST the model (or example name) and return the job envelope without polling."""
        request, opened = self._core.compare_request(model, options, calibration, wait_seconds, filename,
                                                     example_inputs, dynamic_shapes, artifacts)
        try:
            method, path = request.pop("method"), request.pop("url")
            return Job.from_dict(self._core.json_of(self._send(method, path, **request)))
        finally:
            for fh in opened:
                fh.close()

    def compare(
        self,
        model: ModelInput,
        *,
        options: Union[Mapping[str, Any], str, None] = None,
        calibration: CalibrationInput = None,
        wait: bool = True,
        progress: ProgressArg = None,
        max_wait: Optional[float] = None,
        filename: Optional[str] = None,
        example_inputs: Any = None,
        dynamic_shapes: Any = None,
        until: Optional[str] = None,
        artifacts: Optional[Mapping[str, Any]] = None,
    ) -> Any:
        """Compare ``model`` (a path, bytes, a binary file, or an example name like ``"conv_relu"``).

        With torch installed, ``model`` may also be a ``torch.nn.Module``: it is exported with
        ``torch.export.export(model, example_inputs, dynamic_shapes=...)`` to ``.pt2`` in memory
        and uploaded (the server must accept .pt2 uploads).

        ``wait=True`` polls until the job is done and returns its :class:`Report` (raising
        :class:`ComparisonFailed` if the job failed, :class:`WaitTimeout` after ``max_wait``
        seconds); ``wait=False`` returns the :class:`Job` right after the upload.
        ``progress``: ``None`` shows it in a notebook or on a terminal, ``True`` always, ``False``
        never, or a callable that receives each :class:`Job`. ``until``: return as soon as that section of
        the report is finished (see :meth:`wait`). ``artifacts``: quantized .onnx files of the same model
        (name -> path, bytes or binary file), each compared as ``artifacts.<name>`` on every section; with
        ``options={"artifacts": []}`` only these are compared against fp32.
        """
        started = time.monotonic()
        job = self.submit(model, options=options, calibration=calibration, filename=filename,
                          wait_seconds=_POST_WAIT_SECONDS if wait else None,
                          example_inputs=example_inputs, dynamic_shapes=dynamic_shapes, artifacts=artifacts)
        if not wait:
            return job
        return self._wait(job, progress, max_wait, started, until)

    def wait(self, job: Union[Job, str], *, progress: ProgressArg = None, max_wait: Optional[float] = None,
             until: Optional[str] = None) -> Report:
        """Poll ``GET /v1/comparisons/{id}`` until the job is done; return its report.

        ``until``: return as soon as that section is finished, with the report so far (``report.partial``
        true while the job still runs; its figures do not change later): ``"files"``, ``"level_graphs"``,
        ``"accuracy"`` (any artifact's; ``"accuracy:ort_qdq"`` for one), ``"agreement"``, ``"latency"``,
        ``"layers"``, ``"advice"``. A section the job's depth leaves out is never reached: the finished
        report is returned then."""
        return self._wait(job, progress, max_wait, time.monotonic(), until)

    def _wait(self, job: Union[Job, str], progress: ProgressArg, max_wait: Optional[float], started: float,
              until: Optional[str] = None) -> Report:
        current = job if isinstance(job, Job) else self.get(job)
        reporter = reporter_from_arg(progress, started=started)
        deadline = None if max_wait is None else started + max_wait
        delays = _poll_delays()
        try:
            while not current.reached(until):
                reporter.update(current)
                if deadline is not None and time.monotonic() >= deadline:
                    url = self._core.url(f"/v1/comparisons/{current.id}")
                    raise WaitTimeout(f"comparison {current.id} still {current.status} ({current.progress}) after "
                                      f"{max_wait:g}s; poll {url} or call wait() again", url=url, job_id=current.id)
                time.sleep(next(delays))
                current = self.get(current.id)
        finally:
            reporter.close(current)
        if not current.done:  # ``until`` reached while the job runs: the report so far
            return current.report
        return self._core.report_from_job(current)

    def get(self, id: str) -> Job:
        """The job envelope: status, progress, and the report once it succeeded (the sections finished so
        far while it runs)."""
        return Job.from_dict(self._json(f"/v1/comparisons/{id}"))

    def cancel(self, id: str) -> bool:
        """``DELETE /v1/comparisons/{id}``: stop a queued or running job (its worker process too) and delete
        it with its files, or delete a finished one. False when other identical submissions joined the job:
        it runs on for them, and this caller no longer counts. Raises :class:`NotFound` for an unknown id."""
        return self._send("DELETE", f"/v1/comparisons/{id}").status_code == 204

    def report(self, id: str) -> Report:
        """The report of a finished job (raises :class:`ComparisonFailed` for a failed one)."""
        return self._core.report_from_job(self.get(id))

    def report_html(self, id: str) -> str:
        return self._send("GET", f"/v1/comparisons/{id}/report.html", headers={"Accept": "text/html"}).text

    def artifacts(self, id: str) -> List[ArtifactLink]:
        data = self._json(f"/v1/comparisons/{id}/artifacts")
        return [ArtifactLink(a.get("name", ""), a.get("artifact", ""), a.get("level"), a.get("size"), a.get("url", ""))
                for a in (data or {}).get("artifacts", [])]

    def download(self, id: str, artifact: str, dest: Union[str, "os.PathLike[str]"] = ".", *,
                 level: Optional[str] = None) -> Path:
        """Save one .onnx file: ``artifact`` is a file name (``ort_qdq.all.onnx``) or an artifact
        (``ort_qdq``, with ``level=`` for an optimized graph). ``dest`` is a folder or a file path."""
        name = self._core.artifact_name(artifact, level)
        target = _target_path(dest, name)
        path = f"/v1/comparisons/{id}/artifacts/{name}"
        url = self._core.url(path)
        tmp = target.with_name(target.name + ".part")
        try:
            with self._http.stream("GET", path, headers={"Accept": "application/octet-stream"}) as response:
                if response.status_code >= 400:
                    response.read()
                    self._core.check(response)
                with open(tmp, "wb") as fh:
                    for chunk in response.iter_bytes():
                        fh.write(chunk)
            os.replace(tmp, target)
        except httpx.HTTPError as e:
            raise self._core.transport_error(e, "GET", url) from e
        finally:
            if tmp.exists():
                tmp.unlink()
        return target

    def examples(self) -> List[Example]:
        data = self._json("/v1/examples")
        return [Example(e.get("name", ""), e.get("description", ""), e.get("inputs")) for e in data.get("examples", [])]

    def versions(self) -> Dict[str, Any]:
        """``{"versions": {"torch": ..., "onnxruntime": ...}, "python": ..., "cpu": {...}}``."""
        return self._json("/v1/versions")

    def health(self) -> bool:
        try:
            return self._send("GET", "/healthz").status_code == 200
        except QuantCompareError:
            return False


class AsyncClient:
    """The asyncio twin of :class:`Client`: the same methods, awaited."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        timeout: TimeoutArg = DEFAULT_TIMEOUT,
        token: Optional[str] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._core = _Core(base_url, token=token, user_agent=_user_agent())
        self._http = httpx.AsyncClient(base_url=self._core.base_url, timeout=timeout, transport=transport,
                                       headers={**self._core.headers, **(headers or {})})

    @property
    def base_url(self) -> str:
        return self._core.base_url

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"<AsyncClient {self.base_url}>"

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = self._core.url(path)
        for attempt in range(_BUSY_RETRIES + 1):
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.HTTPError as e:
                raise self._core.transport_error(e, method, url) from e
            try:
                return self._core.check(response)
            except Busy as e:
                if attempt == _BUSY_RETRIES:
                    raise
                await asyncio.sleep(min(2.0 if e.retry_after is None else e.retry_after, _MAX_RETRY_SLEEP))
                for part in (kwargs.get("files") or {}).values():
                    if hasattr(part[1], "seek"):
                        part[1].seek(0)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _json(self, path: str) -> Any:
        return self._core.json_of(await self._send("GET", path))

    async def submit(self, model: ModelInput, *, options: Union[Mapping[str, Any], str, None] = None,
                     calibration: CalibrationInput = None, filename: Optional[str] = None,
                     wait_seconds: Optional[int] = None, example_inputs: Any = None,
                     dynamic_shapes: Any = None, artifacts: Optional[Mapping[str, Any]] = None) -> Job:
        request, opened = self._core.compare_request(model, options, calibration, wait_seconds, filename,
                                                     example_inputs, dynamic_shapes, artifacts)
        try:
            method, path = request.pop("method"), request.pop("url")
            return Job.from_dict(self._core.json_of(await self._send(method, path, **request)))
        finally:
            for fh in opened:
                fh.close()

    async def compare(self, model: ModelInput, *, options: Union[Mapping[str, Any], str, None] = None,
                      calibration: CalibrationInput = None, wait: bool = True, progress: ProgressArg = None,
                      max_wait: Optional[float] = None, filename: Optional[str] = None,
                      example_inputs: Any = None, dynamic_shapes: Any = None, until: Optional[str] = None,
                      artifacts: Optional[Mapping[str, Any]] = None) -> Any:
        started = time.monotonic()
        job = await self.submit(model, options=options, calibration=calibration, filename=filename,
                                wait_seconds=_POST_WAIT_SECONDS if wait else None,
                                example_inputs=example_inputs, dynamic_shapes=dynamic_shapes, artifacts=artifacts)
        if not wait:
            return job
        return await self._wait(job, progress, max_wait, started, until)

    async def wait(self, job: Union[Job, str], *, progress: ProgressArg = None,
                   max_wait: Optional[float] = None, until: Optional[str] = None) -> Report:
        return await self._wait(job, progress, max_wait, time.monotonic(), until)

    async def _wait(self, job: Union[Job, str], progress: ProgressArg, max_wait: Optional[float],
                    started: float, until: Optional[str] = None) -> Report:
        current = job if isinstance(job, Job) else await self.get(job)
        reporter = reporter_from_arg(progress, started=started)
        deadline = None if max_wait is None else started + max_wait
        delays = _poll_delays()
        try:
            while not current.reached(until):
                reporter.update(current)
                if deadline is not None and time.monotonic() >= deadline:
                    url = self._core.url(f"/v1/comparisons/{current.id}")
                    raise WaitTimeout(f"comparison {current.id} still {current.status} ({current.progress}) after "
                                      f"{max_wait:g}s; poll {url} or call wait() again", url=url, job_id=current.id)
                await asyncio.sleep(next(delays))
                current = await self.get(current.id)
        finally:
            reporter.close(current)
        if not current.done:
            return current.report
        return self._core.report_from_job(current)

    async def get(self, id: str) -> Job:
        return Job.from_dict(await self._json(f"/v1/comparisons/{id}"))

    async def cancel(self, id: str) -> bool:
        return (await self._send("DELETE", f"/v1/comparisons/{id}")).status_code == 204

    async def report(self, id: str) -> Report:
        return self._core.report_from_job(await self.get(id))

    async def report_html(self, id: str) -> str:
        return (await self._send("GET", f"/v1/comparisons/{id}/report.html", headers={"Accept": "text/html"})).text

    async def artifacts(self, id: str) -> List[ArtifactLink]:
        data = await self._json(f"/v1/comparisons/{id}/artifacts")
        return [ArtifactLink(a.get("name", ""), a.get("artifact", ""), a.get("level"), a.get("size"), a.get("url", ""))
                for a in (data or {}).get("artifacts", [])]

    async def download(self, id: str, artifact: str, dest: Union[str, "os.PathLike[str]"] = ".", *,
                       level: Optional[str] = None) -> Path:
        name = self._core.artifact_name(artifact, level)
        target = _target_path(dest, name)
        path = f"/v1/comparisons/{id}/artifacts/{name}"
        url = self._core.url(path)
        tmp = target.with_name(target.name + ".part")
        try:
            async with self._http.stream("GET", path, headers={"Accept": "application/octet-stream"}) as response:
                if response.status_code >= 400:
                    await response.aread()
                    self._core.check(response)
                with open(tmp, "wb") as fh:
                    async for chunk in response.aiter_bytes():
                        fh.write(chunk)
            os.replace(tmp, target)
        except httpx.HTTPError as e:
            raise self._core.transport_error(e, "GET", url) from e
        finally:
            if tmp.exists():
                tmp.unlink()
        return target

    async def examples(self) -> List[Example]:
        data = await self._json("/v1/examples")
        return [Example(e.get("name", ""), e.get("description", ""), e.get("inputs")) for e in data.get("examples", [])]

    async def versions(self) -> Dict[str, Any]:
        return await self._json("/v1/versions")

    async def health(self) -> bool:
        try:
            return (await self._send("GET", "/healthz")).status_code == 200
        except QuantCompareError:
            return False


def _target_path(dest: Union[str, "os.PathLike[str]"], name: str) -> Path:
    dest_path = Path(dest).expanduser()
    if dest_path.is_dir() or str(dest).endswith(("/", os.sep)):
        dest_path.mkdir(parents=True, exist_ok=True)
        return dest_path / name
    dest_path.parent.mkdir(parents=True, exist_ok=True)
    return dest_path
