"""The FastAPI application: one factory, routers per resource, errors mapped in one place.

The API process never imports torch: jobs run in the executor's worker processes.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from service import __version__
from service.api.deps import require_token
from service.api.envelope import ReportCache
from service.api.errors import install_error_handlers
from service.api.routes import artifacts, comparisons, docs, meta, ops, report_page
from service.config import Settings, get_settings
from service.jobs.factory import make_executor
from service.jobs.storage.level_downloads import RegenerationGate, SharedRegenerations

log = logging.getLogger("quantcompare.api")

DESCRIPTION = """\
Quantize one fp32 model three ways (torchao PT2E, ONNX Runtime `quantize_static` QDQ and
QOperator) and report what each file holds and what ONNX Runtime makes of it at each graph
optimization level. Errors are `application/problem+json` with a stable `code`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        executor = make_executor(settings)
        executor.start()
        app.state.executor = executor
        log.info("quantcompare %s: data in %s, %d workers", __version__, settings.data_dir.resolve(), settings.workers)
        try:
            yield
        finally:
            app.state.level_graph_files.clear()
            executor.stop()

    # FastAPI's own /openapi.json, /docs and /redoc answer without the token and load Swagger UI from a
    # CDN: routes/docs.py serves the first two behind the token, with the assets from the package.
    app = FastAPI(title="quantcompare", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  openapi_url=None, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.reports = ReportCache()
    app.state.uploads = {"active": 0}
    app.state.level_graphs = RegenerationGate(settings.level_graph_slots, settings.level_graph_queue)
    app.state.level_graph_files = SharedRegenerations(app.state.level_graphs, settings.tmp_dir)
    install_error_handlers(app)
    guarded = [Depends(require_token)]
    app.include_router(ops.router)
    for module in (comparisons, artifacts, report_page, meta, docs):
        app.include_router(module.router, dependencies=guarded)
    return app
