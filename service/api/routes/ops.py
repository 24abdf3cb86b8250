"""/healthz (no auth, touches nothing but the event loop) and /metrics (Prometheus)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import ExecutorDep, require_token
from service.schemas.api import Health

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="Liveness: answers without touching workers or the store")
async def healthz() -> Any:
    return Health()


@router.get("/metrics", summary="Prometheus metrics: jobs by state, queue length, stage durations, workers",
            dependencies=[Depends(require_token)], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}})
def metrics(executor: ExecutorDep) -> Response:
    return Response(generate_latest(executor.metrics.registry), media_type=CONTENT_TYPE_LATEST)
