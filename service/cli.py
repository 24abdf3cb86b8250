"""``quantcompare``: the command line over the same core the service runs.

    quantcompare compare (PATH | --example NAME) [--options JSON|@file] [--calibration F.npz] --out DIR
    quantcompare examples
    quantcompare serve [--host H] [--port P]      (the HTTP service)

Exit codes: 0 done (gates passed), 1 a gate failed, 2 the input or options were refused.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from pydantic import ValidationError

from service.api.cli_serve import add_serve_parser
from service.errors import InvalidOptions, QuantCompareError, error_from_os, validation_detail, validation_errors
from service.examples import list_examples
from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.sections import LEVEL_GRAPHS
from service.pipeline.logs import quiet_toolchain_logs
from service.schemas.options import ComparisonOptions
from service.pipeline.quantize.exporter_cache import install_exporter_registry_cache
from service.render.text import summary_table, terminal_safe


def load_options(text: str | None):

    if not text:
        return ComparisonOptions()
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as e:
            raise InvalidOptions(f"cannot read options file {text[1:]!r}: {e.strerror}",
                                 hint="pass --options '{...}' or --options @file.json") from e
    try:
        return ComparisonOptions.model_validate_json(text)
    except ValidationError as e:
        raise InvalidOptions("invalid options: " + validation_detail(validation_errors(e), empty_loc="(body)"), hint="see `quantcompare compare --help` and docs/options.md") from e


def _cmd_compare(args) -> int:
    if not args.verbose:
        quiet_toolchain_logs()

    install_exporter_registry_cache()  # the second export of the job reuses the first one's registry

    if (args.model is None) == (args.example is None):
        raise InvalidOptions("give a model PATH or --example NAME (one of them)",
                             hint="quantcompare compare --example conv_relu --out out/")
    options = load_options(args.options)
    model_path = None
    if args.model is not None:
        model_path = Path(args.model).resolve()
        if not model_path.is_file():
            raise InvalidOptions(f"no such model file: {args.model}", hint="give the path of an .onnx or .pt2 file")
    calibration = Path(args.calibration).resolve() if args.calibration else None
    if calibration is not None and not calibration.is_file():
        raise InvalidOptions(f"no such calibration file: {args.calibration}", hint="give the path of an .npz file")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file where the folder goes (or above it): the user's path, not a quantcompare bug
        ours = error_from_os(e, f"creating the output folder {args.out}")
        if ours is not None:
            raise ours from e
        raise InvalidOptions(f"--out {args.out} cannot be made a folder: {e.strerror}",
                             hint="give --out a folder (it is created if missing), not a file or a path under one") from e

    def progress(stage: str, done: int, total: int) -> None:
        if not args.quiet and sys.stderr.isatty():
            print(f"\r{stage:<10} {done}/{total}   ", end="", file=sys.stderr, flush=True)

    cores, cores_source = _cores(args)
    request = ComparisonRequest(
        options=options, model_path=model_path, example=args.example, calibration_path=calibration,
        model_name=model_path.name if model_path else args.example, data_beside_model=True,
        job_cores=cores, job_cores_source=cores_source,
    )

    def on_section(name: str, partial) -> None:
        # The structure table as soon as it exists: what each file holds and what ORT runs at each level
        # (accuracy, latency and advice follow). On stderr, with the progress: stdout keeps the one
        # summary of the finished report, which a script or a pipe reads.
        if name != LEVEL_GRAPHS or args.quiet:
            return
        if sys.stderr.isatty():
            print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
        print(terminal_safe(summary_table(partial)) + "\n", file=sys.stderr, flush=True)

    report = run_comparison(request, out, progress=progress, on_section=on_section)
    if not args.quiet and sys.stderr.isatty():
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
    (out / "report.json").write_text(report.model_dump_json(indent=2))
    try:
        print(terminal_safe(summary_table(report)))
        print(f"\nreport: {out / 'report.json'}   artifacts: {out / 'artifacts'}/", flush=True)
    except BrokenPipeError:
        # `quantcompare compare ... | head`: the reader left, the report is written, and the exit code
        # stays the verdict's (1 is a failed gate). Python would flush to the closed pipe again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if report.verdict.passed else 1


def _cores(args) -> tuple[int | None, str | None]:
    """The bound on the job's cores: --cores, else QUANTCOMPARE_JOB_CORES, else None (no bound: the cores no
    other job on the machine uses, pipeline/cores.py)."""
    if args.cores is not None:
        if args.cores < 1:
            raise InvalidOptions(f"--cores {args.cores}: give 1 or more", hint="leave --cores out to use every core")
        return args.cores, "--cores"
    raw = os.environ.get("QUANTCOMPARE_JOB_CORES")
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise InvalidOptions(f"QUANTCOMPARE_JOB_CORES={raw!r} is not a whole number of cores (1 or more)",
                                 hint="unset it to use every core, or give --cores N")
        return value, "QUANTCOMPARE_JOB_CORES"
    return None, None


def _cmd_examples(args) -> int:
    for e in list_examples():
        shapes = ", ".join(f"{i['name']}{i['shape']}" for i in e["inputs"])
        print(f"{e['name']:<18}{shapes:<28}{e['description']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quantcompare", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="show the toolchains' own logs")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compare", help="quantize one model three ways and write report.json + artifacts")
    p.add_argument("model", nargs="?", help="fp32 model: .onnx or torch.export .pt2")
    p.add_argument("--example", help="a built-in example instead of a file (see `quantcompare examples`)")
    p.add_argument("--options", help="options as JSON, or @file.json")
    p.add_argument("--calibration", help=".npz with one array per input, samples on the leading axis")
    p.add_argument("--out", required=True, help="output folder (report.json, artifacts/)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line, no early structure table")
    p.add_argument("--cores", type=int, default=None,
                   help="most cores for the untimed work (default: $QUANTCOMPARE_JOB_CORES, else no bound: the cores "
                        "no other job on this machine uses); latency is timed alone on "
                        "options.latency.intra_op_threads either way")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("examples", help="list the built-in example models")
    p.set_defaults(func=_cmd_examples)

    add_serve_parser(sub)  # the HTTP service's subcommands (serve, worker) live with the API
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except QuantCompareError as e:
        print(terminal_safe(f"error: {e}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # a full disk or a denied path is the machine's state, not a quantcompare bug
        ours = error_from_os(e, f"running `quantcompare {args.command}`")
        if ours is None:
            return _internal_error(e, args)
        print(terminal_safe(f"error: {ours}"), file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001
        return _internal_error(e, args)


def _internal_error(e: Exception, args) -> int:
    """An internal bug: say so plainly, the traceback only with -v."""
    logging.getLogger("quantcompare").debug("internal error", exc_info=e)
    if args.verbose:
        raise e
    print(terminal_safe(f"error: internal_error: {type(e).__name__}: {e}\n  hint: this is a quantcompare bug; "
                        "rerun with -v for the traceback and report it"), file=sys.stderr)
    return 3  # not 2: a CI job must tell "my model was refused" from "the tool broke"


if __name__ == "__main__":
    sys.exit(main())
