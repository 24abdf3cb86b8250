"""/v1/comparisons/{id}/report.html: the report for a person."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from service.api.deps import ExecutorDep, job_or_404
from service.api.errors import problem_responses
from service.jobs.storage.artifact_files import downloadable_files
from service.render.page import render_job_page

router = APIRouter(prefix="/v1/comparisons", tags=["report"])

# The page is self-contained (one <style>, inline SVG, style attributes; no script, font or image from
# anywhere): a name a report quotes that slipped past escaping still could not load or run anything.
REPORT_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
              "form-action 'none'; frame-ancestors 'none'")


@router.get("/{job_id}/report.html", response_class=HTMLResponse,
            summary="The report as a page: decision table, levels, rewrites, numerics, latency, downloads",
            responses={200: {"content": {"text/html": {}}, "description": "the page"}, **problem_responses(401, 404)})
def report_html(job_id: str, request: Request, executor: ExecutorDep,
                graph_level: Annotated[str | None, Query(description="the level whose graphs are drawn (default: the "
                                                         "deployed level, all)")] = None) -> HTMLResponse:
    rec = job_or_404(executor, job_id)
    reports = request.app.state.reports
    # A running job's page shows the sections finished so far and reloads (Report.partial).
    report = (reports.load(executor.files, rec.id) if rec.status == "succeeded"
              else reports.load(executor.files, rec.id, partial=True) if rec.status == "running" else None)

    files = downloadable_files(executor.files, rec.id)
    return HTMLResponse(render_job_page(rec, report, files, graph_level=graph_level), headers={"Content-Security-Policy": REPORT_CSP})
