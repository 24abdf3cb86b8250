"""``quantcompare-client``: the command a CI job calls.

    quantcompare-client check MODEL --server URL --gate 'ort_qdq.all.sqnr_db>=25' [--gate ...]
                              [--options JSON|@file.json] [--calibration data.npz] [--out report.json]
                              [--baseline old-report.json] [--junit junit.xml] [--summary-md summary.md]

A gate may be relative to a baseline (``'ort_qdq.all.sqnr_db>=baseline-0.5'``): the baseline is
``--baseline FILE`` (a report.json from an earlier run) or ``options.baseline`` (the id of an
earlier comparison on the same server). ``--junit`` writes one testcase per gate; ``--summary-md``
writes a Markdown summary, which is also appended to ``$GITHUB_STEP_SUMMARY`` when that is set.

``check`` sends the gates as ``options.gates`` so the server's verdict decides, asks for the depth
they need (``structure`` when every gate reads the files and level graphs only: int8_coverage,
status_ok, calibration_data_uploaded; ``standard`` otherwise; an explicit ``options.depth`` wins) and
times the levels its latency gates read, writes the report, prints a one-screen summary and exits

    0  every gate passed
    1  a gate failed (the summary lists which and why)
    2  usage, input or server error (bad gate syntax, missing file, refused model, unreachable server)

Other commands: ``examples``, ``versions``, ``download ID NAME [DEST]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ._ci import gated_level, junit_from_error, junit_from_report, markdown_from_report
from ._client import Client
from ._exceptions import QuantCompareError
from ._gates import GateSyntaxError, baseline_values_from_report, format_gate, options_for_gates, parse_gate
from ._report import Report

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
    c.add_argument("--artifact", action="append", default=[], metavar="NAME=PATH",
                   help="a quantized .onnx of the same model, compared as artifacts.NAME (repeatable; sent as the "
                        "multipart part artifact.NAME)")
    c.add_argument("--out", default="report.json", metavar="PATH", help="where to write the report (default report.json)")
    c.add_argument("--level", default=None,
                   help="level the summary table shows (default: the level the gates read, else all)")
    c.add_argument("--baseline", metavar="REPORT_JSON",
                   help="an earlier report.json that 'baseline' in a gate refers to (or set options.baseline to "
                        "the id of an earlier comparison on the server)")
    c.add_argument("--junit", metavar="PATH", help="write JUnit XML: one testcase per gate")
    c.add_argument("--summary-md", metavar="PATH",
                   help="write a Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set)")
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


def _brought_from_args(values: List[str]) -> Dict[str, str]:
    """``--artifact NAME=PATH`` values as name -> path."""
    out: Dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise _UsageError(f"--artifact {value!r}: write it NAME=PATH, e.g. --artifact mine=mine_int8.onnx")
        out[name] = path
    return out


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


def _write(path: Path, text: str, *, append: bool = False) -> None:
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as fh:
        fh.write(text)


def _baseline_from_file(text: str) -> Report:
    try:
        return Report.load(text)
    except FileNotFoundError:
        raise _UsageError(f"--baseline {text}: no such file") from None
    except (OSError, ValueError, TypeError) as e:
        raise _UsageError(f"--baseline {text}: not a report.json ({e})") from None


def _resolve_baseline(args: argparse.Namespace, options: Dict[str, Any]) -> Optional[Report]:
    """Fill ``baseline_values`` of relative gates from ``--baseline FILE``; refuse a relative gate without one."""
    gates = options["gates"]
    relative = [g for g in gates if isinstance(g, dict) and g.get("relative_to") == "baseline"]
    if args.baseline and options.get("baseline"):
        raise _UsageError("give either --baseline FILE or options.baseline (a comparison id), not both")
    if not args.baseline:
        if relative and not options.get("baseline"):
            raise _UsageError(f"gate {format_gate(relative[0])!r} is relative to a baseline, but none was given"
                              "\n  hint: pass --baseline report.json from an earlier run, or set options.baseline "
                              "to the id of an earlier comparison on this server")
        return None
    baseline = _baseline_from_file(args.baseline)
    options["gates"] = [
        {**g, "baseline_values": baseline_values_from_report(baseline, g)}
        if isinstance(g, dict) and g.get("relative_to") == "baseline" and g.get("baseline_values") is None else g
        for g in gates
    ]
    return baseline


def _check(args: argparse.Namespace) -> int:
    try:
        return _run_check(args)
    except (_UsageError, QuantCompareError, FileNotFoundError, ValueError, TypeError) as e:
        if args.junit:  # CI shows "could not run" as an errored test rather than a missing file
            _write(Path(args.junit), junit_from_error(str(e)))
        raise


def _compare_or_cancel(qc: Client, args: argparse.Namespace, options: dict) -> Any:
    """Submit, then wait; interrupted (Ctrl-C, or a cancelled CI run's SIGINT/SIGTERM) after the job
    exists, the job is cancelled on the server before the interrupt goes on: nothing keeps running
    for a caller that is gone."""
    job = qc.compare(args.model, options=options, calibration=args.calibration, wait=False,
                     artifacts=_brought_from_args(args.artifact))
    try:
        return qc.wait(job, progress=False if args.quiet else True, max_wait=args.max_wait)
    except KeyboardInterrupt:
        if not job.done:
            try:
                stopped = qc.cancel(job.id)
                print(f"quantcompare-client: job {job.id} " + ("cancelled" if stopped else
                      "left running: other submissions joined it"), file=sys.stderr)
            except QuantCompareError as e:
                print(f"quantcompare-client: could not cancel job {job.id}: {e}", file=sys.stderr)
        raise


def _interrupt_on_sigterm() -> None:
    """A cancelled CI job gets SIGTERM (GitHub: after SIGINT; GitLab: only it): treat it as Ctrl-C."""
    def raise_interrupt(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, raise_interrupt)


def _run_check(args: argparse.Namespace) -> int:
    try:
        gates = [parse_gate(g) for g in args.gate]
    except GateSyntaxError as e:
        raise _UsageError(f"{e}\n  hint: {e.hint}") from None
    options = _options_from_arg(args.options)
    existing = options.get("gates") or []
    if not isinstance(existing, list):
        raise _UsageError("options.gates must be a list")
    options["gates"] = list(existing) + gates
    options = options_for_gates(options)  # the depth the gates need, and no more
    requested = [format_gate(g) if isinstance(g, dict) and "metric" in g else str(g) for g in options["gates"]]
    baseline = _resolve_baseline(args, options)

    with Client(args.server, timeout=args.timeout, token=args.token) as qc:
        report = _compare_or_cancel(qc, args, options)
        if baseline is None and options.get("baseline"):
            try:  # only for the summary's deltas; the server already resolved the gates
                baseline = qc.report(str(options["baseline"]))
            except QuantCompareError:
                baseline = None
        report_url = f"{qc.base_url}/v1/comparisons/{report.id}/report.html" if report.id else None
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    report.save(out)
    level = args.level or gated_level([g for g in options["gates"] if isinstance(g, dict)])
    print(report.summary_text(level))
    print(f"report: {out}")
    if args.junit:
        _write(Path(args.junit), junit_from_report(report, report_url=report_url, baseline=baseline))
        print(f"junit: {args.junit}")
    summary = None
    if args.summary_md or os.environ.get("GITHUB_STEP_SUMMARY"):
        summary = markdown_from_report(report, level=level, baseline=baseline, report_url=report_url)
    if args.summary_md:
        _write(Path(args.summary_md), summary)
        print(f"summary: {args.summary_md}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        _write(Path(os.environ["GITHUB_STEP_SUMMARY"]), summary, append=True)
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
    _interrupt_on_sigterm()
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
