"""The client's errors, mapped from the server's ``application/problem+json`` and from httpx.

Our exception hierarchy:

* QuantCompareError                every error the client raises; ``url`` is the request's URL
  + TransportError                 the request did not get an HTTP answer
  |  + ConnectError                  nothing listens at the URL, DNS failed, connection refused/reset
  |  + Timeout                       connect/read/write/pool timeout (``Client(timeout=...)``)
  + WaitTimeout                    the job was still running when ``max_wait`` ran out (``job_id``)
  + APIError                       the server answered 4xx/5xx; ``status``, ``code``, ``hint``, ``problem``
  |  + InvalidRequest                400/422: the model, options or calibration were refused
  |  + Unauthorized                  401/403: missing or wrong token (``QUANTCOMPARE_API_TOKEN``)
  |  + NotFound                      404: no such comparison, artifact or example
  |  + PayloadTooLarge               413: the upload exceeds the server's limit
  |  + Busy                          429/503: try again after ``retry_after`` seconds
  |  + ServerError                   other 5xx
  + ComparisonFailed               the job finished with status ``failed``; ``job_id``, ``code``, ``problem``

``code`` is the server's stable machine-readable code (``invalid_model``, ``invalid_options``,
``input_shape_required``, ...): switch on it, not on the message.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

__all__ = [
    "QuantCompareError",
    "TransportError",
    "ConnectError",
    "Timeout",
    "WaitTimeout",
    "APIError",
    "InvalidRequest",
    "Unauthorized",
    "NotFound",
    "PayloadTooLarge",
    "Busy",
    "ServerError",
    "ComparisonFailed",
]


class QuantCompareError(Exception):
    """Base class of every error this client raises."""

    def __init__(self, message: str, *, url: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.url = url


class TransportError(QuantCompareError):
    """The request never got an HTTP answer."""


class ConnectError(TransportError):
    """Could not connect to the server."""


class Timeout(TransportError):
    """A connect, read, write or pool timeout ran out."""


class WaitTimeout(QuantCompareError):
    """The comparison was still running when the client stopped waiting."""

    def __init__(self, message: str, *, url: Optional[str] = None, job_id: Optional[str] = None) -> None:
        super().__init__(message, url=url)
        self.job_id = job_id


class APIError(QuantCompareError):
    """The server answered with an error status; fields come from its problem+json body."""

    def __init__(
        self,
        message: str,
        *,
        url: Optional[str] = None,
        status: int,
        code: Optional[str] = None,
        hint: Optional[str] = None,
        title: Optional[str] = None,
        problem: Optional[Mapping[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message, url=url)
        self.status = status
        self.code = code
        self.hint = hint
        self.title = title
        self.problem = dict(problem or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        head = f"{self.code or 'http_' + str(self.status)}: {self.message} (HTTP {self.status}"
        head += f" from {self.url})" if self.url else ")"
        return head + (f"\n  hint: {self.hint}" if self.hint else "")


class InvalidRequest(APIError):
    """400/422: the server refused the model, the options or the calibration data."""


class Unauthorized(APIError):
    """401/403: the server wants ``Authorization: Bearer <token>``."""


class NotFound(APIError):
    """404: no such comparison, artifact or example."""


class PayloadTooLarge(APIError):
    """413: the upload is larger than the server accepts."""


class Busy(APIError):
    """429/503: the server is at capacity; ``retry_after`` says when to try again."""


class ServerError(APIError):
    """Any other 5xx: a bug or an outage on the server side."""


class ComparisonFailed(QuantCompareError):
    """The comparison job ended with status ``failed``."""

    def __init__(
        self,
        message: str,
        *,
        url: Optional[str] = None,
        job_id: Optional[str] = None,
        code: Optional[str] = None,
        hint: Optional[str] = None,
        problem: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message, url=url)
        self.job_id = job_id
        self.code = code
        self.hint = hint
        self.problem = dict(problem or {})

    def __str__(self) -> str:
        head = f"{self.code or 'comparison_failed'}: {self.message}"
        head += f" (job {self.job_id})" if self.job_id else ""
        return head + (f"\n  hint: {self.hint}" if self.hint else "")


def api_error_from_problem(status: int, body: Any, *, url: str, retry_after: Optional[str] = None) -> APIError:
    """Pick the exception class for an HTTP error status and fill it from a problem+json body.

    A body that is not problem+json (a proxy's HTML page, FastAPI's default ``{"detail": ...}``)
    still gives a usable message.
    """
    problem: dict[str, Any] = body if isinstance(body, dict) else {}
    detail = problem.get("detail")
    if isinstance(detail, list):  # FastAPI's own validation errors
        detail = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    message = str(detail or problem.get("message") or problem.get("title") or "").strip()
    if not message:
        text = body if isinstance(body, str) else ""
        message = text.strip()[:200] or f"HTTP {status}"
    if status in (400, 422):
        cls: type[APIError] = InvalidRequest
    elif status in (401, 403):
        cls = Unauthorized
    elif status == 404:
        cls = NotFound
    elif status == 413:
        cls = PayloadTooLarge
    elif status in (429, 503):
        cls = Busy
    elif status >= 500:
        cls = ServerError
    else:
        cls = APIError
    seconds: Optional[float] = None
    if retry_after:
        try:
            seconds = float(retry_after)
        except ValueError:
            seconds = None
    return cls(
        message,
        url=url,
        status=status,
        code=problem.get("code"),
        hint=problem.get("hint"),
        title=problem.get("title"),
        problem=problem,
        retry_after=seconds,
    )
