"""``quantcompare worker``: run jobs from the Celery broker (docs/scaling.md)."""

from __future__ import annotations

import argparse
import logging
import sys

from service.config import ConfigurationError, Settings, get_settings
from service.jobs.factory import check_deployment
from service.log_format import configure_logging


def add_worker_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "worker", help="run jobs from the broker (QUANTCOMPARE_EXECUTOR=celery)",
        description="Run a Celery worker with its own pool of warm worker processes. Settings come from "
                    "QUANTCOMPARE_* variables, the same as the API's: QUANTCOMPARE_BROKER_URL, and "
                    "QUANTCOMPARE_DATA_DIR on the volume the API shares.")
    p.add_argument("--workers", type=int, default=None, help="worker processes = jobs at once (QUANTCOMPARE_WORKERS)")
    p.add_argument("--data-dir", default=None, help="data directory shared with the API (QUANTCOMPARE_DATA_DIR)")
    p.add_argument("--broker-url", default=None, help="redis://host:port/db (QUANTCOMPARE_BROKER_URL)")
    p.add_argument("--name", default=None, help="Celery node name (default quantcompare-<pid>@<host>)")
    p.set_defaults(func=run_worker_command)
    return p


def settings_or_exit(**overrides) -> Settings | int:
    """The settings from QUANTCOMPARE_* with the command line's ``overrides`` (None: not given); one line on
    stderr and exit code 2 when a setting is invalid (a bad database URL, a negative budget)."""
    try:
        settings = get_settings()
        given = {k: v for k, v in overrides.items() if v is not None}
        return Settings.model_validate({**settings.model_dump(), **given}) if given else settings
    except ValueError as e:  # pydantic's ValidationError is one too
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2


def run_worker_command(args: argparse.Namespace) -> int:
    from service.jobs.celery.worker import run_worker  # celery is imported only by its own command
    settings = settings_or_exit(workers=args.workers, data_dir=args.data_dir, broker_url=args.broker_url)
    if isinstance(settings, int):
        return settings
    if not settings.broker_url:
        print("error: `quantcompare worker` needs QUANTCOMPARE_BROKER_URL (or --broker-url), e.g. redis://127.0.0.1:6379/0",
              file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format, role="celery")
    if (code := preflight(settings)) is not None:
        return code
    return run_worker(settings, node_name=args.name)


def preflight(settings: Settings) -> int | None:
    """The store and storage answer (exit code None), or one line on stderr and exit code 2."""
    try:
        checked = check_deployment(settings)
    except ConfigurationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.getLogger("quantcompare").info("store: %s; files: %s", *checked)
    return None
