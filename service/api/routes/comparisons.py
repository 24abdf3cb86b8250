"""/v1/comparisons: submit a model (or an example), read the job."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from service.api import prevalidate
from service.api.deps import ExecutorDep, SettingsDep, job_or_404
from service.api.baseline import options_with_baseline
from service.api.envelope import envelope
from service.api.errors import problem_responses
from service.api.uploads import display_name, receive_form, receive_json
from service.errors import Busy, InvalidOptions, InvalidRequest, validation_detail, validation_errors
from service.examples import get_example
from service.jobs.submission import submit_or_reuse
from service.pipeline.environment import toolchain_versions
from service.schemas.options import ComparisonOptions
from service.schemas.api import ComparisonBody, Job

log = logging.getLogger("quantcompare.api")

router = APIRouter(prefix="/v1/comparisons", tags=["comparisons"])

WaitQuery = Annotated[float, Query(ge=0, le=3600, description="seconds to wait for the job to finish")]

_REQUEST_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["model"],
                "properties": {
                    "model": {"type": "string", "format": "binary", "description": ".onnx or .pt2 (sniffed by content)"},
                    "options": {"type": "string", "description": "ComparisonOptions as a JSON string"},
                    "calibration": {"type": "string", "format": "binary",
                                    "description": ".npz with one array per model input (first axis = samples)"},
                },
                "patternProperties": {
                    r"^artifact\.[a-z][a-z0-9_]{0,39}$": {
                        "type": "string", "format": "binary",
                        "description": "a quantized .onnx of the same model, compared as artifacts.<name> "
                                       "(up to 8; same inputs and outputs as the model, else artifact_mismatch)"},
                },
            }
        },
        "application/json": {"schema": ComparisonBody.model_json_schema(ref_template="#/components/schemas/{model}")},
    },
}


def resolve_options(raw: dict[str, Any]) -> ComparisonOptions:
    try:
        return ComparisonOptions.model_validate(raw)
    except ValidationError as e:
        errors = validation_errors(e, skip=())
        detail = validation_detail(errors, empty_loc="options")[:2000]
        raise InvalidOptions(f"invalid options: {detail}", hint="GET /openapi.json describes ComparisonOptions",
                             errors=errors) from None


async def wait_for(executor, rec, wait: float, max_wait: float):
    deadline = time.monotonic() + min(wait, max_wait)
    while not rec.finished and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        rec = await run_in_threadpool(executor.get, rec.id)
    return rec


def answer_status(*, created: bool, cached: bool, waited: bool, finished: bool) -> int:
    """200 for a cached result, a poll, or a new job that finished within ``?wait``; else 202.

    A new job submitted without ``?wait`` always answers 202, even when a worker refused it before
    the handler got here: the status must not depend on that race (a client branching on 200/202
    would otherwise see either for the same upload).
    """
    return 202 if created and not cached and not (waited and finished) else 200


def respond(request: Request, executor, rec, *, cached: bool, created: bool, waited: bool = False) -> Response:
    job = envelope(rec, executor.files, request.app.state.reports, cached=cached)
    status = answer_status(created=created, cached=cached, waited=waited, finished=rec.finished)
    headers = {"Location": job.links.self} if status == 202 else None
    if rec.finished:
        return Response(_job_json(job, executor.files), status_code=status, media_type="application/json", headers=headers)
    return JSONResponse(job.model_dump(mode="json"), status_code=status, headers=headers)


def _job_json(job: Job, files) -> bytes:
    """The envelope with the stored report spliced in as written.

    ``envelope`` has already validated the report against this schema (once per file, cached);
    re-serializing a large report through pydantic on every poll or repeat submission cost
    ~40 ms for resnet18, so its bytes go out as they are.
    """
    if job.report is None:
        return job.model_dump_json().encode()
    try:
        raw = files.report_bytes(job.id)
    except OSError:
        return job.model_dump_json().encode()
    head = job.model_dump_json(exclude={"report"}).encode()
    return head[:-1] + b',"report":' + raw + b"}"


@router.post(
    "", response_model=Job, status_code=202,
    summary="Submit a model (multipart) or a built-in example (JSON) for comparison",
    openapi_extra={"requestBody": _REQUEST_BODY},
    responses={200: {"model": Job, "description": "finished within ?wait, or a cached result"},
               202: {"model": Job, "description": "accepted; poll the Location"},
               **problem_responses(400, 401, 408, 413, 415, 422, 429, 503)},
)
async def submit_comparison(request: Request, settings: SettingsDep, executor: ExecutorDep, wait: WaitQuery = 0) -> Any:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    versions = toolchain_versions()
    staged = None
    uploads = request.app.state.uploads
    try:
        if ctype == "multipart/form-data":
            if uploads["active"] >= settings.max_concurrent_uploads:
                executor.metrics.rejected.labels("uploads").inc()
                raise Busy(f"{uploads['active']} uploads are already in progress", hint="retry shortly",
                           retry_after=2, status=429)
            uploads["active"] += 1
            try:
                staged = executor.staging_dir()
                form = await receive_form(
                    request, staged, max_model_bytes=int(settings.max_upload_mb * 1024 * 1024),
                    max_calibration_bytes=int(settings.max_calibration_mb * 1024 * 1024), allow_pt2=settings.allow_pt2,
                    idle_timeout_s=settings.upload_idle_timeout_s, min_bytes_per_s=settings.upload_min_kib_s * 1024)
            finally:
                uploads["active"] -= 1
            options = resolve_options(form.options)
            if prevalidate.applies(settings):  # cheap checks now: most refusals become a 4xx, not a failed job
                await run_in_threadpool(prevalidate.prevalidate_upload, form.model.path,
                                        form.calibration.path if form.calibration else None, options, settings,
                                        brought={n: f.path for n, f in form.artifacts.items()})
            prevalidate.refuse_unknown_artifacts(options, form.artifacts)
            spec_kw = dict(model_file=str(form.model.path.relative_to(staged)),
                           calibration_file=str(form.calibration.path.relative_to(staged)) if form.calibration else None,
                           model_name=display_name(form.model.filename),
                           artifact_files={n: str(f.path.relative_to(staged)) for n, f in form.artifacts.items()})
            # the brought files are part of what is compared: another file is another result
            model_key = f"sha256:{form.model.sha256}" + "".join(
                f"+{n}=sha256:{f.sha256}" for n, f in sorted(form.artifacts.items()))
            calib_key = form.calibration.sha256 if form.calibration else None
        elif ctype == "application/json":
            raw = await receive_json(request, idle_timeout_s=settings.upload_idle_timeout_s,
                                     min_bytes_per_s=settings.upload_min_kib_s * 1024)
            try:
                body = ComparisonBody.model_validate(raw)
            except ValidationError as e:
                raise InvalidRequest("the JSON body must be {\"example\": <name>, \"options\": {...}}",
                                     hint="GET /v1/examples lists the examples",
                                     errors=validation_errors(e, skip=()),
                                     status=422) from None

            get_example(body.example)  # unknown names are refused here, not in a worker
            options = resolve_options(body.options)
            prevalidate.refuse_unknown_artifacts(options, {})
            spec_kw = dict(example=body.example, model_name=body.example)
            model_key, calib_key = f"example:{body.example}", None
        else:
            raise InvalidRequest("send multipart/form-data (a model upload) or application/json (an example)",
                                 status=415, hint="curl -F model=@net.onnx http://HOST/v1/comparisons")

        # The store, the data budget and a bucket are read and written on the request pool: with
        # PostgreSQL and S3 each is a network round trip, and the event loop serves every other request.
        options = await run_in_threadpool(options_with_baseline, options, executor, request.app.state.reports)
        submitted = await run_in_threadpool(partial(
            submit_or_reuse, executor, settings, model_key=model_key, calibration_key=calib_key,
            options=options.model_dump(mode="json"), versions=versions, staged=staged, spec_fields=spec_kw,
            report_loads=lambda job_id: request.app.state.reports.load(executor.files, job_id) is not None))
        staged = None  # the job owns the folder now (or it was removed for a cached result)
        rec = submitted.record
        if submitted.cached:
            return await run_in_threadpool(partial(respond, request, executor, rec, cached=True, created=True))
    except ClientDisconnect:
        log.info("client went away during an upload; nothing kept")
        return Response(status_code=400)
    finally:
        if staged is not None:  # refused, malformed or the client went away: leave nothing behind
            shutil.rmtree(staged, ignore_errors=True)
    if wait:
        rec = await wait_for(executor, rec, wait, settings.max_wait_s)
    return await run_in_threadpool(partial(respond, request, executor, rec, cached=False, created=True,
                                           waited=bool(wait)))


@router.get("/{job_id}", response_model=Job, summary="A job: status, progress, and the report when done",
            responses=problem_responses(401, 404, 422))
async def get_comparison(job_id: str, request: Request, settings: SettingsDep, executor: ExecutorDep,
                         wait: WaitQuery = 0) -> Any:
    rec = await run_in_threadpool(job_or_404, executor, job_id)
    if wait:
        rec = await wait_for(executor, rec, wait, settings.max_wait_s)
    return await run_in_threadpool(partial(respond, request, executor, rec, cached=False, created=False))


@router.delete("/{job_id}", status_code=204, response_class=Response, response_model=None,
               summary="Cancel a queued or running job (its worker process is stopped), or delete a finished one",
               responses={202: {"model": Job, "description": "other submissions joined this job: it runs on for them"},
                          204: {"description": "cancelled or deleted: the job, its files and its pins are gone"},
                          **problem_responses(401, 404, 503)})
async def cancel_comparison(job_id: str, request: Request, executor: ExecutorDep) -> Any:
    # Identical submissions in flight share one job: each DELETE withdraws one of them, and the job is
    # stopped only when the last one does (a CI matrix cancelling one leg leaves the others their result).
    await run_in_threadpool(job_or_404, executor, job_id)
    outcome, rec = await run_in_threadpool(executor.cancel, job_id)
    if outcome == "missing":  # deleted by another request in between: 404 like any unknown id
        await run_in_threadpool(job_or_404, executor, job_id)
    if outcome == "kept":
        kept = await run_in_threadpool(partial(respond, request, executor, rec, cached=False, created=False))
        kept.status_code = 202
        return kept
    return Response(status_code=204)
