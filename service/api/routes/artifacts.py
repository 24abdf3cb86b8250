"""/v1/comparisons/{id}/artifacts: every .onnx a job wrote, optimized graphs included."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from service.api.deps import ExecutorDep
from service.api.errors import problem_responses
from service.api.routes.comparisons import job_or_404
from service.errors import NotFound
from service.jobs.storage.level_downloads import level_graph_entries, regenerated_level_graph
from service.jobs.spec import ARTIFACTS_DIR
from service.pipeline.files import split_name
from service.schemas.api import ArtifactEntry, ArtifactList

router = APIRouter(prefix="/v1/comparisons", tags=["artifacts"])

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")


def artifact_files(job_dir: Path) -> list[Path]:
    folder = job_dir / ARTIFACTS_DIR
    if not folder.is_dir():
        return []
    # Regular files only: a symlink planted by a model's external-data tricks is never served.
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and _NAME.fullmatch(p.name))


def downloadable_files(job_dir: Path) -> list[tuple[str, int]]:
    """(name, size) of every file a user can download: the stored ones, and the level graphs the
    job kept as digests only (made again on download; size = the file that will be served)."""
    out = {p.name: p.stat().st_size for p in artifact_files(job_dir)}
    for entry in level_graph_entries(job_dir).values():
        out.setdefault(entry.name, entry.bytes)
    return sorted(out.items())


def download_name(model_name: str | None, job_id: str, name: str) -> str:
    return f"{model_name or 'model'}-{job_id[:8]}.{name}"


@router.get("/{job_id}/artifacts", response_model=ArtifactList, summary="Files the job produced",
            responses=problem_responses(401, 404))
def list_artifacts(job_id: str, executor: ExecutorDep) -> Any:
    rec = job_or_404(executor, job_id)
    out = []
    for name, size in downloadable_files(executor.job_dir(rec.id)):
        artifact, level = split_name(name)
        out.append(ArtifactEntry(name=name, artifact=artifact, level=level, size=size,
                                 url=f"/v1/comparisons/{rec.id}/artifacts/{name}"))
    return ArtifactList(artifacts=out)


@router.get("/{job_id}/artifacts/{name}", summary="Download one file",
            response_class=FileResponse,
            responses={200: {"content": {"application/octet-stream": {}}, "description": "the file"},
                       **problem_responses(401, 404, 409)})
def download_artifact(job_id: str, name: str, executor: ExecutorDep) -> Any:
    rec = job_or_404(executor, job_id)
    job_dir = executor.job_dir(rec.id)
    match = next((p for p in artifact_files(job_dir) if p.name == name), None)
    entry = level_graph_entries(job_dir).get(name) if match is None else None
    if entry is not None:
        scratch = executor.settings.tmp_dir / f"download-{uuid.uuid4().hex}"
        try:
            made = regenerated_level_graph(job_dir, entry, scratch, memory_mb=executor.settings.worker_memory_mb)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        filename = download_name(rec.spec.model_name, rec.id, name)
        if made.suffix == ".zip":
            filename += ".zip"
        return FileResponse(made, media_type="application/octet-stream", filename=filename,
                            background=BackgroundTask(shutil.rmtree, scratch, ignore_errors=True))
    if match is None:
        raise NotFound("this job has no artifact by that name", hint=f"GET /v1/comparisons/{rec.id}/artifacts lists them")
    return FileResponse(match, media_type="application/octet-stream",
                        filename=download_name(rec.spec.model_name, rec.id, match.name))
