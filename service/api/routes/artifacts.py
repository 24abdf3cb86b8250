"""/v1/comparisons/{id}/artifacts: every .onnx a job wrote, optimized graphs included.

Files come from the job's storage (``jobs/storage/``): a file in its folder is sent as is; from a
bucket it streams through here, or the client is redirected to a presigned URL
(``QUANTCOMPARE_STORAGE_DOWNLOADS=redirect``). A level graph kept as digests only is made again.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from service.api.deps import ExecutorDep, job_or_404
from service.api.errors import problem_responses
from service.api.file_response import DownloadResponse, StreamedDownload
from service.errors import ArtifactGone, NotFound
from service.jobs.storage.artifact_files import download_name, downloadable_files
from service.jobs.storage.disk import pin, unpin
from service.jobs.storage.files import Download
from service.jobs.storage.level_downloads import LevelGraphEntry, level_graph_entries, regenerated_level_graph
from service.pipeline.files import split_name
from service.render.graphs.node_data import NODE_DATA_SUFFIX, node_data_from_report
from service.schemas.api import ArtifactEntry, ArtifactList

router = APIRouter(prefix="/v1/comparisons", tags=["artifacts"])


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
                       **problem_responses(401, 404, 409, 410, 416, 429)})
async def download_artifact(job_id: str, name: str, request: Request, executor: ExecutorDep) -> Any:
    # Async, so that waiting for a level graph holds no thread of the request pool; the file system
    # and the store are read on that pool (an eviction holding the lock must not stall the event loop).
    rec = job_or_404(executor, job_id)
    if name.endswith(NODE_DATA_SUFFIX):  # made from the report, next to the level graph it describes
        return await run_in_threadpool(_node_data, request, executor, rec, name)
    # Pinned until the body is sent (or the client left): eviction skips the job meanwhile.
    marker = await run_in_threadpool(pin, executor.settings.data_dir, rec.id)
    try:
        return await _download(request, executor, rec, name, release=[partial(unpin, marker)])
    except BaseException:
        unpin(marker)
        raise


def _node_data(request: Request, executor, rec, name: str) -> Response:
    """``<artifact>.<level>.node_data.json``: Model Explorer's node data for that level graph (render/graphs/node_data.py)."""
    artifact, level = split_name(name[: -len(NODE_DATA_SUFFIX)] + ".onnx")
    report = request.app.state.reports.load(executor.files, rec.id) if rec.status == "succeeded" else None
    if report is None:
        raise NotFound("this job has no finished report to make node data from",
                       hint=f"wait for the job: GET /v1/comparisons/{rec.id}")
    data = report.model_dump(mode="json") if hasattr(report, "model_dump") else dict(report)
    made = node_data_from_report(data, artifact, level) if level else None
    if made is None:
        raise NotFound("this job has no level graph by that name to make node data for",
                       hint=f"GET /v1/comparisons/{rec.id}/artifacts lists the level graphs (<artifact>.<level>.onnx)")
    filename = download_name(rec.spec.model_name, rec.id, name)
    return Response(json.dumps(made), media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


def _locate(executor, job_id: str, name: str, filename: str) -> tuple[Download | None, LevelGraphEntry | None, bool]:
    job_or_404(executor, job_id)  # evicted in the moment before the pin: the job is gone, say so
    try:
        stored = executor.files.download(job_id, name, filename=filename)
    except FileNotFoundError:  # removed between the listing and the read (another API's eviction, by hand)
        raise ArtifactGone("this job's file was removed while it was being read",
                           hint="the job was evicted or expired: submit the model again") from None
    entry = level_graph_entries(executor.files, job_id).get(name) if stored is None else None
    return stored, entry, stored is None and entry is None and executor.files.report_version(job_id) is None


async def _download(request: Request, executor, rec, name: str, *, release: list):
    filename = download_name(rec.spec.model_name, rec.id, name)
    stored, entry, gone = await run_in_threadpool(_locate, executor, rec.id, name, filename)
    if entry is not None:
        # Every download of this file of this job shares one regeneration and the file it made.
        make = partial(regenerated_level_graph, executor.files, rec.id, entry,
                       memory_mb=executor.settings.worker_memory_mb)
        made, done = await request.app.state.level_graph_files.file((rec.id, name), make)
        try:
            filename += ".zip" if made.suffix == ".zip" else ""
            return DownloadResponse(made, filename=filename, release=[*release, done])
        except BaseException:
            done()
            raise
    if stored is None:
        if gone and rec.status == "succeeded":
            raise ArtifactGone("this job's files are no longer stored",
                               hint="the job was evicted or expired: submit the model again")
        raise NotFound("this job has no artifact by that name", hint=f"GET /v1/comparisons/{rec.id}/artifacts lists them")
    if stored.redirect is not None:  # the bucket serves the bytes: nothing of this request to hold
        for done in release:
            done()
        return RedirectResponse(stored.redirect, status_code=307)
    if stored.path is not None:
        return DownloadResponse(stored.path, filename=filename, release=release)
    return StreamedDownload(stored.chunks, size=stored.size, filename=filename, release=release)
