"""One error tree for the whole service.

Every refusal a user can see is a :class:`QuantCompareError` with a stable ``code`` (part of
the API contract: clients switch on it), a message that says what happened, and a ``hint``
that says what to do. The HTTP layer maps ``status`` onto the response in one place
(``service.api.errors``); the CLI prints ``code: message`` and the hint.

Foreign failures (onnx, torch, onnxruntime) are wrapped at the boundary with ``raise ... from e``
so the chain stays in the log while the user sees only our words.

    QuantCompareError                     400
    ├── InvalidModel        invalid_model        422  bytes are not a model we can parse
    ├── UnsupportedModel    unsupported_model    422  a valid model we cannot take (op, opset, input type)
    ├── InvalidOptions      invalid_options      422  options JSON malformed, unknown or out of range
    ├── InvalidCalibration  invalid_calibration  422  uploaded .npz does not fit the model's inputs
    ├── InputShapeRequired  input_shape_required 422  dynamic dims need values (names every dim)
    ├── UnsafeArchive       unsafe_archive       422  a .pt2 / archive that fails the static check
    ├── BudgetExceeded      budget_exceeded      413/422  model too large for the configured budgets
    ├── PayloadTooLarge     payload_too_large    413
    ├── UploadTooSlow       upload_too_slow      408  an upload stalled or came in below the minimum rate
    ├── HeadersTooSlow      header_timeout       408  a request's line and headers did not arrive in time
    ├── IncompleteUpload    incomplete_upload    400  the body ended before its form's closing boundary
                                                      (or short of its Content-Length): nothing ran
    ├── InvalidRequest      invalid_request      400  the HTTP request itself is malformed
    ├── Unauthorized        unauthorized         401  an API token is required
    ├── NotFound            not_found            404
    ├── Busy                busy                 429/503 (+ Retry-After)
    │   ├── DataDirFull     data_dir_full        503 (+ Retry-After): no room under QUANTCOMPARE_MAX_DATA_GB
    │   ├── NotReady        not_ready            503 (+ Retry-After): /readyz, a dependency (database, broker, store) is down
    │   └── StorageUnavailable storage_unavailable 503 (+ Retry-After): the bucket (QUANTCOMPARE_STORAGE_URL)
    │                                                did not answer or refused; also a job's error when its files could not be moved
    ├── LevelGraphChanged   level_graph_mismatch 409  a level graph made again for a download differs
    ├── ArtifactGone        artifact_gone        410  the job's files were removed while it was downloaded
    ├── RangeNotSatisfiable range_not_satisfiable 416 a download's Range header is malformed or past the file
    ├── ArtifactMismatch    artifact_mismatch    422  a brought quantized file (artifact.<name>) is not the same
                                                      model: its inputs/outputs differ from the fp32 model's
    ├── PathSkipped         path_skipped         (inside a report, per artifact; never an HTTP error)
    │   └── ToolUnavailable tool_unavailable     (inside a report: the tool of nncf_qdq / modelopt_qdq /
                                                      quark_qdq is not installed; the hint is the command that installs it)
    ├── OrtQuantizerFailed  ort_quantizer_failed (inside a report: an ORT path's error; never an HTTP error)
    ├── Pt2eFileRejected    pt2e_file_rejected   (inside a report: ORT cannot load the file PT2E wrote)
    ├── OrtFileRejected     ort_file_rejected    (inside a report: ORT cannot load the file quantize_static wrote)
    ├── PlatformUnavailable platform_unavailable (inside a report: an emulated platform whose runtime is missing or broken)
    ├── FileAccessDenied    file_access_denied   403  a path cannot be read or written (EACCES, EPERM, EROFS)
    └── JobFailed                                (the ``error`` of a failed job; never an HTTP error)
        ├── WorkerDied          worker_died          the worker process died (signal, stage)
        ├── JobTimeout          job_timeout          ran past QUANTCOMPARE_JOB_TIMEOUT_S
        ├── WorkerMemoryLimit   worker_memory_limit  past QUANTCOMPARE_WORKER_MEMORY_MB
        ├── Interrupted         interrupted          the service or its worker went away, twice
        ├── JobCancelled        cancelled            DELETE /v1/comparisons/{id} stopped it (its row and files
                                                     go with it: only a worker's log sees this one)
        ├── JobFolderMissing    job_folder_missing   the job's files were removed before it ran
        ├── DiskFull            disk_full            no space left where it writes (ENOSPC, EDQUOT)
        └── InternalError       internal_error       a bug; the traceback is in the log only

A 415 (wrong content type) is an ``invalid_request``; so is any malformed request.

Inside a report, a failed or skipped path's ``error.code`` is one of the codes above, or one that
has no exception class: ``out_of_memory`` (its toolchain failed to allocate), ``ort_run_failed`` (ORT
loaded the file and ran it at no level) and ``path_failed`` (a tool raised something we have no
rule for; ``error.type`` names the exception and the message quotes it).
"""

from __future__ import annotations

import errno


class QuantCompareError(Exception):
    code = "quantcompare_error"
    status = 400
    title = "Request failed"

    def __init__(self, message: str, *, hint: str | None = None, status: int | None = None, **details):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if status is not None:
            self.status = status
        # Extra machine-readable fields (e.g. the dims that need values). Never server paths.
        self.details = details

    def to_dict(self) -> dict:
        out = {"code": self.code, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        out.update(self.details)
        return out

    def __str__(self) -> str:  # what the CLI prints
        return f"{self.code}: {self.message}" + (f"\n  hint: {self.hint}" if self.hint else "")


class InvalidModel(QuantCompareError):
    code, status, title = "invalid_model", 422, "The upload is not a model quantcompare can read"


class UnsupportedModel(QuantCompareError):
    code, status, title = "unsupported_model", 422, "The model is valid but not supported"


class InvalidOptions(QuantCompareError):
    code, status, title = "invalid_options", 422, "The options are not valid"


class InvalidCalibration(QuantCompareError):
    code, status, title = "invalid_calibration", 422, "The calibration data does not fit the model"


class InputShapeRequired(QuantCompareError):
    code, status, title = "input_shape_required", 422, "Dynamic input dimensions need values"


class UnsafeArchive(QuantCompareError):
    code, status, title = "unsafe_archive", 422, "The archive was refused by the static safety check"


class BudgetExceeded(QuantCompareError):
    code, status, title = "budget_exceeded", 422, "The model exceeds a configured budget"


class PayloadTooLarge(QuantCompareError):
    code, status, title = "payload_too_large", 413, "The upload is too large"


class UploadTooSlow(QuantCompareError):
    """An upload that stalled, or came in below the server's minimum rate, loses its upload slot."""

    code, status, title = "upload_too_slow", 408, "The upload was too slow"


class HeadersTooSlow(QuantCompareError):
    """A connection that sent no complete request line and headers within the server's header timeout:
    an idle or half-sent request would otherwise hold its connection for ever (answered by the server's
    HTTP protocol, service/api/edge.py, not by a route)."""

    code, status, title = "header_timeout", 408, "The request's headers did not arrive in time"


class IncompleteUpload(QuantCompareError):
    """A body that ended early: a multipart form without its closing boundary, or fewer bytes than
    its Content-Length (a proxy's limit or a dropped connection cut it). Nothing runs on a part of a
    form: a cut options part would run with default options, a cut calibration part on a stub."""

    code, status, title = "incomplete_upload", 400, "The upload arrived incomplete"


class InvalidRequest(QuantCompareError):
    """The HTTP request itself is malformed (multipart, JSON, content type, query)."""

    code, status, title = "invalid_request", 400, "The request is malformed"


class Unauthorized(QuantCompareError):
    code, status, title = "unauthorized", 401, "An API token is required"


class NotFound(QuantCompareError):
    code, status, title = "not_found", 404, "Not found"


class Busy(QuantCompareError):
    code, status, title = "busy", 503, "The service is busy"

    def __init__(self, message: str, *, retry_after: int = 5, **kw):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class DataDirFull(Busy):
    """The data directory's budget (QUANTCOMPARE_MAX_DATA_GB) has no room for this job even after
    evicting every finished job: running and queued jobs hold the rest."""

    code, status, title = "data_dir_full", 503, "No room for this job in the data directory"


class NotReady(Busy):
    """/readyz: a dependency of this API (the job database, the broker, the file store) does not answer."""

    code, status, title = "not_ready", 503, "A dependency of the service is down"


class StorageUnavailable(Busy):
    """The S3-compatible bucket (QUANTCOMPARE_STORAGE_URL) did not answer or refused a request: a
    submission gets 503 + Retry-After; a job whose inputs or results could not be moved fails with it."""

    code, status, title = "storage_unavailable", 503, "The file storage is unavailable"


class StoreUnavailable(Busy):
    """The job store (PostgreSQL at QUANTCOMPARE_DATABASE_URL) could not be reached or dropped the request
    twice: the API answers 503 + Retry-After, never a bare 500."""

    code, status, title = "store_unavailable", 503, "The job store is unavailable"


class LevelGraphChanged(QuantCompareError):
    """A level graph made again for a download differs from the one the job measured."""

    code, status, title = "level_graph_mismatch", 409, "The optimized graph cannot be reproduced here"


class ArtifactGone(QuantCompareError):
    """The job is listed but the file a download reads (or makes a level graph from) is no longer on
    disk: evicted or expired in the moment before the download pinned it, or removed by hand."""

    code, status, title = "artifact_gone", 410, "The job's files are gone"


class RangeNotSatisfiable(QuantCompareError):
    code, status, title = "range_not_satisfiable", 416, "The requested range cannot be served"


class PathSkipped(QuantCompareError):
    """A path that cannot apply to this input (e.g. no torch graph for an ONNX upload)."""

    code, status, title = "path_skipped", 200, "A quantization path was skipped"

    def __init__(self, message: str, *, stage: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.stage = stage


class ToolUnavailable(PathSkipped):
    """A tool path (nncf_qdq, modelopt_qdq, quark_qdq) whose tool is not installed where the job runs: the
    path is skipped, the hint names the command that installs it, the rest of the job is unchanged."""

    code, title = "tool_unavailable", "The quantization tool is not installed"


class ArtifactMismatch(QuantCompareError):
    """A quantized file brought beside the fp32 model (``artifact.<name>``) whose graph inputs or outputs
    differ from the fp32 model's (names, ranks, fixed dims, dtypes): it is another model, and comparing it on
    the fp32 model's samples would measure nothing. ``differences`` lists each one."""

    code, status, title = "artifact_mismatch", 422, "A brought file is not the same model"


class TailConversionChanged(PathSkipped):
    """PT2E of a detector cut at its selection: onnx's version converter changed what the upload's
    post-processing computes once rewritten for the PT2E file's opset (quantize/selection_tail.py)."""

    code, title = "tail_conversion_changed", "The post-processing changed under opset conversion"


class OrtQuantizerFailed(QuantCompareError):
    """ORT's quantize_static failed on this model: names ORT's function, the trait, what to do."""

    code, status, title = "ort_quantizer_failed", 500, "ORT's quantizer failed on this model"


class NonFiniteCalibration(QuantCompareError):
    """A quantizer found NaN or inf in an activation on the calibration samples: no scale fits it."""

    code, status, title = "nonfinite_calibration", 422, "The model computes NaN or inf on the calibration samples"


class Pt2eFileRejected(QuantCompareError):
    """torch.onnx.export wrote the PT2E file, but ORT refuses to load it: no level could run it."""

    code, status, title = "pt2e_file_rejected", 500, "ORT cannot load the PT2E file"


class OrtFileRejected(QuantCompareError):
    """ORT's quantize_static wrote a file, but ORT refuses to load it: no level could run it."""

    code, status, title = "ort_file_rejected", 500, "ORT cannot load the file its quantizer wrote"


class OrtWouldAbort(QuantCompareError):
    """Creating a session at this level makes ONNX Runtime abort the process (a C++ assertion in a
    graph transformer), confirmed in a separate process: the level is not run."""

    code, status, title = "ort_would_abort", 500, "ONNX Runtime aborts on this file at this level"


class PlatformUnavailable(QuantCompareError):
    """An emulated platform (``options.platforms``) whose runtime is missing or broken: that platform is
    left out of the report with this code and the job's other platforms still run."""
    code, status, title = "platform_unavailable", 422, "The emulated platform cannot run here"


class JobFailed(QuantCompareError):
    """Why a job failed outside the pipeline's own refusals; stored as the job's problem."""

    code, status, title = "job_failed", 500, "The job failed"


class WorkerDied(JobFailed):
    code, status, title = "worker_died", 500, "The worker running this job died"


class JobTimeout(JobFailed):
    code, status, title = "job_timeout", 504, "The job ran past its time limit"


class WorkerMemoryLimit(JobFailed):
    code, status, title = "worker_memory_limit", 500, "The job used more memory than allowed"


class Interrupted(JobFailed):
    code, status, title = "interrupted", 500, "The job was interrupted"


class JobCancelled(JobFailed):
    code, status, title = "cancelled", 409, "The job was cancelled"


class JobFolderMissing(JobFailed):
    code, status, title = "job_folder_missing", 500, "The job's files are gone"


class InternalError(JobFailed):
    code, status, title = "internal_error", 500, "Internal error"


class DiskFull(JobFailed):
    code, status, title = "disk_full", 507, "No space left to write the job's files"


class FileAccessDenied(QuantCompareError):
    code, status, title = "file_access_denied", 403, "A file could not be read or written"


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}


def error_from_os(e: BaseException, during: str) -> QuantCompareError | None:
    """Our words for a failed read or write of a file (``during``: what was being done), or None when
    ``e`` is no such failure. A full disk or a denied path is the machine's state, not a quantcompare
    bug, and the user (or the operator) can act on it."""
    if not isinstance(e, OSError) or e.errno not in _DISK_FULL | _DENIED:
        return None
    where = f" ({e.filename})" if e.filename else ""
    if e.errno in _DISK_FULL:
        return DiskFull(f"no space left on the disk while {during}{where}: {e.strerror}",
                        hint="free space on that disk (or point the output or QUANTCOMPARE_DATA_DIR at a larger one; "
                             "the service's QUANTCOMPARE_MAX_DATA_GB keeps finished jobs within a budget), then retry")
    return FileAccessDenied(f"cannot read or write a file while {during}{where}: {e.strerror}",
                            hint="check the path's permissions (and that the disk is not read-only), then retry")


ECHO_MAX_CHARS = 64
MAX_VALIDATION_ERRORS = 32  # a body of 10,000 unknown keys is answered with the first ones


def shown(value: str, limit: int = ECHO_MAX_CHARS) -> str:
    """A name a client sent, as an error message may quote it: cut to ``limit`` characters (an unknown
    example name of 200 KB was echoed whole), the cut said."""
    value = str(value)
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


# Pydantic's error types whose own message reads as jargon to a person.
_PLAIN_MESSAGES = {"extra_forbidden": "unknown field", "json_invalid": "not valid JSON"}


def validation_errors(e, *, skip=("body", "query", "path")) -> list[dict[str, str]]:
    """A pydantic ``ValidationError`` as ``[{"loc": "latency.runs", "msg": ...}]``: where and what,
    never the input value (it may be large or hostile). ``skip`` drops FastAPI's location prefixes."""
    return [{"loc": ".".join(shown(p) for p in err.get("loc", ()) if p not in skip),
             "msg": _PLAIN_MESSAGES.get(err.get("type"), err.get("msg", "invalid"))}
            for err in e.errors()[:MAX_VALIDATION_ERRORS]]


def validation_detail(errors: list[dict[str, str]], *, empty_loc: str, limit: int = 8) -> str:
    """Those errors in one line a person can act on: 'latency.runs: must be >= 1; ...'."""
    return "; ".join(f"{x['loc'] or empty_loc}: {x['msg']}" for x in errors[:limit])
