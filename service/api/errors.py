"""Every error the HTTP API returns, mapped in one place onto ``application/problem+json``.

Domain errors (``service.errors``) keep their ``code`` and ``status``; request-shape errors
become ``invalid_request``; anything else is ``internal_error`` (500) with the traceback in the
log and nothing of it (no paths, no exception text) in the response.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.errors import Busy, InvalidRequest, QuantCompareError, Unauthorized, validation_detail, validation_errors
from service.schemas.api import PROBLEM_MEDIA_TYPE, Problem, problem, problem_from_error

log = logging.getLogger("quantcompare.api")


def problem_response(body: dict, status: int, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


async def _domain(request: Request, exc: QuantCompareError) -> JSONResponse:
    headers = {}
    if isinstance(exc, Busy):
        headers["Retry-After"] = str(max(1, int(exc.retry_after)))
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = 'Bearer realm="quantcompare"'
    return problem_response(problem_from_error(exc), exc.status, headers)


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    # Only where and what: never the input value (it may be large or hostile).
    errors = validation_errors(exc)
    detail = validation_detail(errors, empty_loc="request")[:2000]
    return problem_response(problem("invalid_request", InvalidRequest.title, 422, detail,
                                    "see the OpenAPI document at /openapi.json", errors=errors), 422)


_HTTP_CODES = {404: ("not_found", "Not found"), 405: ("method_not_allowed", "Method not allowed"),
               413: ("payload_too_large", "The upload is too large"), 415: ("invalid_request", InvalidRequest.title)}


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code, title = _HTTP_CODES.get(exc.status_code, ("http_error", "Request failed"))
    detail = "no such route" if exc.status_code == 404 else (exc.detail if isinstance(exc.detail, str) else title)
    return problem_response(problem(code, title, exc.status_code, detail), exc.status_code,
                            dict(exc.headers) if exc.headers else None)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(problem("internal_error", "Internal error", 500,
                                    "the server failed to handle this request",
                                    "this is a bug in quantcompare; the server log has the details"), 500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(QuantCompareError, _domain)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)


def problem_responses(*statuses: int) -> dict:
    """OpenAPI ``responses=`` entries for these error statuses."""

    return {s: {"model": Problem, "content": {PROBLEM_MEDIA_TYPE: {}}, "description": "problem details"} for s in statuses}
