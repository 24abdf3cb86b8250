"""Per-request resources, as ``Annotated[..., Depends(...)]``."""

from __future__ import annotations

import hmac
import re
from typing import Annotated

from fastapi import Depends, Request

from service.config import Settings
from service.errors import NotFound, Unauthorized
from service.jobs.executor import Executor
from service.jobs.store import JobRecord

_ID = re.compile(r"[0-9a-f]{32}")


def settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def executor_dep(request: Request) -> Executor:
    return request.app.state.executor


SettingsDep = Annotated[Settings, Depends(settings_dep)]
ExecutorDep = Annotated[Executor, Depends(executor_dep)]


def require_token(request: Request, settings: SettingsDep) -> None:
    token = settings.api_token
    if not token:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Unauthorized("this server needs an API token", hint="send 'Authorization: Bearer <token>'")


def job_or_404(executor: Executor, job_id: str) -> JobRecord:
    rec = executor.get(job_id) if _ID.fullmatch(job_id) else None
    if rec is None:
        raise NotFound(f"no comparison with id {job_id[:40]!r}", hint="ids come from POST /v1/comparisons")
    return rec
