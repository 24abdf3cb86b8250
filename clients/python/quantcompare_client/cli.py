"""``quantcompare-client``: the command a CI job calls.

    quantcompare-client check MODEL --server URL --gate 'ort_qdq.all.sqnr_db>=25' [--gate ...]
                              [--options JSON|@file.json] [--calibration data.npz] [--out report.json]

``check`` sends the gates as ``options.gates`` so the server's verdict decides, writes the
report, prints a one-screen summary and exits

    0  every gate passed
    1  a gate failed (the summary lists which and why)
    2  usage, input or server error (bad gate syntax, missing file, refused model, unreachable server)

Other commands: ``examples``, ``versions``, ``download ID NAME [DEST]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from ._client import Client
from ._exceptions import QuantCompareError
from ._gates import GateSyntaxError, format_gate, parse_gate

EXIT_PASSED, EXIT_GATE_FAILED, EXIT_ERROR = 0, 1, 2
ENV_SERVER, ENV_TOKEN = "QUANTCOMPARE_URL", "QUANTCOMPARE_API_TOKEN"


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="quantcompare-client",
        description="Client for the quantcompare service (PT2E vs ONNX Runtime quantization).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def server_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--server", default=os.environ.get(ENV_SERVER),
                        help=f"base URL of the service, e.g. http://127.0.0.1:8000 (default: ${ENV_SERVER})")
        sp.add_argument("--token", default=os.environ.get(ENV_TOKEN),
                        help=f"bearer token if the server wants one (default: ${ENV_TOKEN})")
        sp.add_argument("--timeout", type=float, default=60.0, help="HTTP timeout per request, seconds (default 60)")

    c = sub.add_parser("check", help="compare a model and exit 0/1 on the gates (for CI)",
                       description="Compare MODEL on the server, gate the verdict, write the report. "
                                   "Exit 0: all gates pass; 1: a gate failed; 2: usage, input or server error.")
    c.add_argument("model", metavar="MODEL", help="a .onnx / .pt2 file, or a built-in example name")
    server_args(c)
    c.add_argument("--gate", action="append", default=[], metavar="GATE",
                   help="threshold like 'ort_qdq.all.sqnr_db>=25', '*.all.int8_coverage>=0.9', "
                        "'pt2e_qdq.all.latency_ratio<=1.2', 'status_ok' (repeatable)")
    c.add_argument("--options", metavar="JSON", help="comparison options as JSON, or @path/to/options.json")
    c.add_argument("--calibration", metavar="NPZ", help="calibration samples (.npz keyed by input name)")
    c.add_argument("--out", default="report.json", metavar="PATH", help="where to write the report (default report.json)")
    c.add_argument("--level", default="all", help="level the summary table shows (default all)")
    c.add_argument("--max-wait", type=float, default=None, metavar="SECONDS",
                   help="give up (exit 2) if the comparison is not done by then")
    c.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    e = sub.add_parser("examples", help="list the server's built-in example models")
    server_args(e)
    v = sub.add_parser("versions", help="toolchain versions and CPU of the server")
    server_args(v)
    d = sub.add_parser("download", help="save one artifact (.onnx) of a finished comparison")
    d.add_argument("id", metavar="ID")
    d.add_argument("name", metavar="NAME", help="e.g. ort_qdq.onnx or ort_qdq.all.onnx")
    d.add_argument("dest", nargs="?", default=".", metavar="DEST", help="folder or file (default .)")
    server_args(d)
    return p


def _options_from_arg(text: Optional[str]) -> Dict[str, Any]:
    if not text:
        return {}
    source = "--options"
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise _UsageError(f"--options {path}: {e.strerror or e}") from None
        source = str(path)
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise _UsageError(f"{source} is not valid JSON: {e}") from None
    if not isinstance(options, dict):
        raise _UsageError(f"{source} must be a JSON object")
    return options


def _check(args: argparse.Namespace) -> int:
    try:
        gates = [parse_gate(g) for g in args.gate]
    except GateSyntaxError as e:
        raise _UsageError(f"{e}\n  hint: {e.hint}") from None
    options = _options_from_arg(args.options)
    existing = options.get("gates") or []
    if not isinstance(existing, list):
        raise _UsageError("options.gates must be a list")
    options["gates"] = list(existing) + gates
    requested = [format_gate(g) if isinstance(g, dict) and "metric" in g else str(g) for g in options["gates"]]

    with Client(args.server, timeout=args.timeout, token=args.token) as qc:
        report = qc.compare(args.model, options=options, calibration=args.calibration,
                            progress=False if args.quiet else True, max_wait=args.max_wait)
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    report.save(out)
    print(report.summary_text(args.level))
    print(f"report: {out}")
    # Never let a server that ignored the gates turn into a silent pass in CI.
    if len(report.verdict.gates) < len(requested):
        print(f"quantcompare-client: error: the server evaluated {len(report.verdict.gates)} of "
              f"{len(requested)} gates ({', '.join(requested)})", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_PASSED if report.verdict.passed else EXIT_GATE_FAILED


def _examples(args: argparse.Namespace) -> int:
    with Client(args.server, timeout=args.timeout, token=args.token) as qc:
        examples = qc.examples()
    width = max((len(e.name) for e in examples), default=0)
    for e in examples:
        print(f"{e.name.ljust(width)}  {e.description}")
    return EXIT_PASSED


def _versions(args: argparse.Namespace) -> int:
    with Client(args.server, timeout=args.timeout, token=args.token) as qc:
        print(json.dumps(qc.versions(), indent=2))
    return EXIT_PASSED


def _download(args: argparse.Namespace) -> int:
    with Client(args.server, timeout=args.timeout, token=args.token) as qc:
        print(qc.download(args.id, args.name, args.dest))
    return EXIT_PASSED


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)  # usage errors exit 2 here
    prog = "quantcompare-client"
    if not getattr(args, "server", None):
        print(f"{prog}: error: --server URL is required (or set ${ENV_SERVER})", file=sys.stderr)
        return EXIT_ERROR
    commands = {"check": _check, "examples": _examples, "versions": _versions, "download": _download}
    try:
        return commands[args.command](args)
    except (_UsageError, QuantCompareError, FileNotFoundError, ValueError, TypeError) as e:
        # QuantCompareError covers refusals (APIError: code, message, hint), failed jobs and an
        # unreachable server; each prints its own URL or job id.
        print(f"{prog}: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
