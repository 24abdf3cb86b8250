"""/openapi.json and /docs, behind the API token like every route but /healthz.

Swagger UI's files come from the ``swagger-ui-bundle-v2`` package (pinned), served from here: the
page loads nothing from a CDN, which a service inside a company network may not reach, and its
Content-Security-Policy allows this server only. FastAPI's own /docs and /redoc (CDN scripts, no
token) are turned off in ``create_app``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse
from swagger_ui_bundle import swagger_ui_path

from service.api.file_response import DownloadResponse
from service.errors import NotFound

router = APIRouter(include_in_schema=False)

_OURS = Path(__file__).resolve().parents[1] / "static"
ASSETS = {"swagger-ui-bundle.js": Path(swagger_ui_path) / "swagger-ui-bundle.js",
          "swagger-ui.css": Path(swagger_ui_path) / "swagger-ui.css",
          "favicon-32x32.png": Path(swagger_ui_path) / "favicon-32x32.png",
          "docs-init.js": _OURS / "docs-init.js"}
# Swagger UI sets style attributes from its script and shows images as data: URLs.
DOCS_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>quantcompare: HTTP API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
<link rel="icon" href="/docs/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/docs-init.js"></script>
</body>
</html>
"""


@router.get("/openapi.json")
def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
def docs() -> HTMLResponse:
    return HTMLResponse(_PAGE, headers={"Content-Security-Policy": DOCS_CSP})


@router.get("/docs/{asset}")
def docs_asset(asset: str) -> DownloadResponse:
    path = ASSETS.get(asset)
    if path is None:
        raise NotFound("no such file of the API docs", hint="open /docs")
    return DownloadResponse(path, media_type=None, headers={"Cache-Control": "public, max-age=86400"})
