"""``quantcompare serve``: the HTTP API with its local worker pool (one process + workers)."""

from __future__ import annotations

import argparse

from service.api.app import create_app
from service.api.edge import edge_protocol
from service.jobs.cli_worker import add_worker_parser, preflight, settings_or_exit
from service.log_format import configure_logging


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("serve", help="run the HTTP API and its worker pool",
                              description="Run the HTTP API. Settings come from QUANTCOMPARE_* variables (docs/settings.md).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=None, help="worker processes (QUANTCOMPARE_WORKERS)")
    p.add_argument("--data-dir", default=None, help="data directory (QUANTCOMPARE_DATA_DIR)")
    p.set_defaults(func=run_serve)
    # `quantcompare worker` (Celery executor) lives with the job system.

    add_worker_parser(subparsers)
    return p


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = settings_or_exit(workers=args.workers, data_dir=args.data_dir)
    if isinstance(settings, int):
        return settings
    configure_logging(settings.log_level, settings.log_format, role="api")
    if (code := preflight(settings)) is not None:  # a wrong database or bucket: one line, exit 2
        return code
    # One API process: it owns the worker pool, so no uvicorn --workers here.
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=settings.log_level,
                proxy_headers=False, server_header=False, timeout_graceful_shutdown=5,
                http=edge_protocol(settings.header_timeout_s),
                log_config=None)  # uvicorn's loggers go through ours (escaped), not its own formatters
    return 0
