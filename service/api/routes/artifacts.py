"""/v1/comparisons/{id}/artifacts: every .onnx a job wrote, optimized graphs included.

Files come from the job's storage (``jobs/storage/``): a file in its folder is sent as is; from a
bucket it streams through here, or the client is redirected to a presigned URL
(``QUANTCOMPARE_STORAGE_DOWNLOADS=redirect``). A level graph kept as digests only is made again.
"""

from __future__ import annotations

import shutil
import uuid
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, StreamingResponse
from starlette.background import BackgroundTask

from service.api.deps import ExecutorDep
from service.api.errors import problem_responses
from service.api.routes.comparisons import job_or_404
from service.errors import NotFound
from service.jobs.storage.files import Download, JobFiles
from service.jobs.storage.level_downloads import level_graph_entries, regenerated_level_graph
from service.pipeline.files import split_name
from service.schemas.api import ArtifactEntry, ArtifactList

router = APIRouter(prefix="/v1/comparisons", tags=["artifacts"])

def downloadable_files(files: JobFiles, job_id: str) -> list[tuple[str, int]]:
    """(name, size) of every file a user can download: the stored ones, and the level graphs the
    job kept as digests only (made again on download; size = the file that will be served)."""
    out = files.artifacts(job_id)
    for entry in level_graph_entries(files, job_id).values():
        out.setdefault(entry.name, entry.bytes)
    return sorted(out.items())


def download_name(model_name: str | None, job_id: str, name: str) -> str:
    return f"{model_name or 'model'}-{job_id[:8]}.{name}"


@router.get("/{job_id}/artifacts", response_model=ArtifactList, summary="Files the job produced",
            responses=problem_responses(401, 404))
def list_artifacts(job_id: str, executor: ExecutorDep) -> Any:
    rec = job_or_404(executor, job_id)
    out = []
    for name, size in downloadable_files(executor.files, rec.id):
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
    filename = download_name(rec.spec.model_name, rec.id, name)
    stored = executor.files.download(rec.id, name, filename=filename)
    entry = level_graph_entries(executor.files, rec.id).get(name) if stored is None else None
    if entry is not None:
        scratch = executor.settings.tmp_dir / f"download-{uuid.uuid4().hex}"
        try:
            made = regenerated_level_graph(executor.files, rec.id, entry, scratch,
                                           memory_mb=executor.settings.worker_memory_mb)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        if made.suffix == ".zip":
            filename += ".zip"
        return FileResponse(made, media_type="application/octet-stream", filename=filename,
                            background=BackgroundTask(shutil.rmtree, scratch, ignore_errors=True))
    if stored is None:
        raise NotFound("this job has no artifact by that name", hint=f"GET /v1/comparisons/{rec.id}/artifacts lists them")
    return file_response(stored, filename)


def file_response(stored: Download, filename: str):
    if stored.redirect is not None:
        return RedirectResponse(stored.redirect, status_code=307)
    if stored.path is not None:
        return FileResponse(stored.path, media_type="application/octet-stream", filename=filename)
    return StreamingResponse(stored.chunks, media_type="application/octet-stream", headers={
        "Content-Length": str(stored.size), "Content-Disposition": f'attachment; filename="{filename}"'})
