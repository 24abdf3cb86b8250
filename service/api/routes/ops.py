"""/healthz (liveness: no auth, touches nothing but the event loop), /readyz (readiness: no auth, asks each
dependency, service/jobs/readiness.py) and /metrics (Prometheus)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import ExecutorDep, require_token
from service.api.errors import problem_responses
from service.errors import NotReady
from service.jobs.readiness import dependencies_down, dependency_names
from service.schemas.api import Health

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="Liveness: answers without touching workers or the store")
async def healthz() -> Any:
    return Health()


@router.get("/readyz", summary="Readiness: 200 when the database, broker and store answer; 503 naming those down",
            responses={200: {"description": "every dependency answered"}, **problem_responses(503)})
async def readyz(executor: ExecutorDep) -> Any:
    down = await run_in_threadpool(dependencies_down, executor)
    if down:
        raise NotReady(f"down: {', '.join(down)}", hint="the server log says why; retry after the Retry-After time",
                       retry_after=5, dependencies={name: down.get(name, "up") for name in dependency_names(executor)})
    return JSONResponse({"status": "ready", "dependencies": dict.fromkeys(dependency_names(executor), "up")})


@router.get("/metrics", summary="Prometheus metrics: jobs by state, queue length, stage durations, workers",
            dependencies=[Depends(require_token)], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}})
def metrics(executor: ExecutorDep) -> Response:
    return Response(generate_latest(executor.metrics.registry), media_type=CONTENT_TYPE_LATEST)
