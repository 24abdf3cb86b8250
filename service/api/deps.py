"""Per-request resources, as ``Annotated[..., Depends(...)]``."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from service.errors import Unauthorized
from service.config import Settings
from service.jobs.executor import Executor


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
