"""Running one path so that it fails alone: the error becomes a ``PathError`` a person can act on."""

from __future__ import annotations

import logging
import os
import re
import resource
import traceback
from dataclasses import dataclass

from service.errors import DiskFull, PathSkipped, QuantCompareError, error_from_os
from service.pipeline.time_limit import TimeLimitReached, time_limited
from service.schemas.report import PathError

log = logging.getLogger(__name__)


def first_line(e: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` (a toolchain's message can run to pages), server paths
    scrubbed first (a job folder's path is 100 characters of nothing). A line still past ``limit``
    keeps its start and its end: ORT ends a load failure with the node it names ("... in node
    (<name>)"), which is what a hint to exclude that node needs."""
    text = str(e).strip()
    if not text:
        return type(e).__name__
    line = scrub(text.splitlines()[0])
    if len(line) > limit:
        tail = limit // 3
        line = f"{line[:limit - tail - 5]} ... {line[-tail:]}"
    return f"{type(e).__name__}: {line}"


def _root_dirs() -> list[str]:
    """The top-level directories a server path starts with: this machine's, and the usual ones."""
    try:
        here = {d for d in os.listdir("/") if re.fullmatch(r"[\w.\-+@]+", d)}
    except OSError:
        here = set()
    return sorted(here | {"tmp", "root", "home", "usr", "opt", "var", "work", "srv", "mnt", "etc", "lib", "app",
                          "private", "Users", "proc", "run"})


# A server path starts at a root directory. ONNX node and tensor names are path-like too
# ('/encoder/layer.0/attention/MatMul', tf2onnx's 'model/conv1/BiasAdd'): a message that names them
# must keep them, or a nodes_to_exclude it lists cannot be used.
_ABS_PATH = re.compile(r"/(?:" + "|".join(map(re.escape, _root_dirs())) + r")(?:/[\w.\-+@]+)+")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# What to do when a quantizer calibrated NaN or inf (ort_fixups.py: ORT's ranges; pt2e.py: its observers).
NONFINITE_HINT = ("the samples are likely outside what the model accepts (samples.generators in the report says how "
                  "they were made): upload representative inputs as an .npz, or set options.input_values; every path "
                  "calibrates on the same samples. A tensor infinite on any data (a mask filled with -inf) needs its node "
                  "left in float: options.ort.nodes_to_exclude keeps an inf scale out of ORT's file; a NaN needs the op "
                  "types that read or write it left out of options.ort.op_types_to_quantize, since ORT's calibrator "
                  "measures every tensor of a listed op type, excluded node or not")

# (artifact or "*", exception type name or "*", message substring, hint). First match wins.
_HINTS: list[tuple[str, str, str, str]] = [
    ("pt2e_qdq", "TimeLimitReached", "",
     "PT2E's time grows with the torch graph's ops (unrolled LSTM/GRU/Loop steps above all): a shorter sequence "
     "in options.input_shapes shrinks it; a higher options.pt2e.time_limit_s lets it finish (on a server, within "
     "QUANTCOMPARE_JOB_TIMEOUT_S); options.artifacts without pt2e_qdq skips it. The ORT paths are unaffected"),
    ("ort_qoperator", "AttributeError", "",
     "quantize_static crashed in QOperator format, a known ORT failure on some graphs; "
     "the QDQ format (ort_qdq) usually works on the same model"),
    ("pt2e_qdq", "*", "torch.float64",
     "the model computes in float64 and torchao's XNNPACK quantizer takes float32: export it in float32 "
     "and upload it again; the ORT paths are unaffected"),
    ("pt2e_qdq", "*", "GuardOnDataDependentSymNode",
     "torch.export hit data-dependent control flow; export the model with torch.export yourself "
     "and upload the .pt2, or compare the ORT paths only (options.artifacts)"),
    ("pt2e_qdq", "*", "Constraints violated",
     "a dim marked dynamic was specialized by the model's code; fix that dim with options.input_shapes"),
    ("pt2e_qdq", "TorchExportError", "",
     "torch.onnx.export could not re-export the quantized torch graph; the ORT paths are unaffected. "
     "Fixing dynamic dims with options.input_shapes, or uploading a torch.export .pt2, usually avoids it"),
    ("*", "*", "shape inference",
     "ONNX shape inference failed; fix dynamic dims with options.input_shapes or simplify the model"),
    ("*", "*", "", "this path failed inside the toolchain; the other paths are unaffected. "
     "The message above is the toolchain's; check options (e.g. options.ort, options.pt2e) or report it with the model"),
]


# What each toolchain says when an allocation fails (numpy and Python raise MemoryError).
_OUT_OF_MEMORY = ("can't allocate memory", "Cannot allocate memory", "std::bad_alloc", "Failed to allocate memory",
                  "Unable to allocate", "out of memory")


def out_of_memory(exc: BaseException) -> bool:
    """An allocation failed somewhere in this exception's chain (causes and contexts)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError) or any(m in str(exc) for m in _OUT_OF_MEMORY):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def memory_hint() -> str:
    """What to do when a path ran out of memory, with this process's own limit when it has one."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    where = (f"this worker may map {limit // (1024 * 1024)} MiB (its address-space limit: "
             "QUANTCOMPARE_WORKER_MEMORY_MB on the server); raise it, or " if limit != resource.RLIM_INFINITY
             else "")
    return (f"the path ran out of memory, not into a fault of the model: {where}use smaller options.input_shapes "
            "or fewer samples (calibration_samples, eval_samples); the other paths are unaffected")


def scrub(message: str) -> str:
    """Keep server paths out of anything a user sees."""
    message = _ANSI.sub("", message)  # torch colours its exceptions
    return _ABS_PATH.sub(lambda m: "<path>/" + m.group(0).rsplit("/", 1)[-1], message)


def hint_for(artifact: str, exc: BaseException) -> str:
    return matched_hint(artifact, exc) or _HINTS[-1][3]


def matched_hint(artifact: str, exc: BaseException) -> str | None:
    """The first row of ``_HINTS`` but the catch-all that matches ``exc`` (its causes included), or None."""
    name, text = type(exc).__name__, f"{exc}"
    chain = exc.__cause__
    while chain is not None:
        text += f" {type(chain).__name__} {chain}"
        chain = chain.__cause__
    for art, etype, needle, hint in _HINTS[:-1]:
        if art in ("*", artifact) and etype in ("*", name) and needle in text:
            return hint
    return None


def _summary(text: str) -> str:
    """torch.onnx.export's errors are a page of advice; the cause is under "Exception summary"."""
    text = _ANSI.sub("", text)
    if "## Exception summary" in text:
        tail = [ln.strip() for ln in text.split("## Exception summary", 1)[1].splitlines() if ln.strip()]
        return "torch.export failed: " + " ".join(tail[:2])
    return text


OUT_OF_MEMORY = "out_of_memory"  # PathError.code of a path whose toolchain failed to allocate
PATH_TIME_LIMIT = "path_time_limit"  # PathError.code of a path stopped at its time limit (time_limit.py)


@dataclass
class PathOutcome:
    ok: bool
    value: object = None
    error: PathError | None = None
    skipped: bool = False


def run_path(artifact: str, stage: str, fn, *args, time_limit_s: float | None = None, **kwargs) -> PathOutcome:
    """``fn(*args, **kwargs)`` as the path's outcome; stopped past ``time_limit_s`` seconds (the timer is
    armed and disarmed inside the ``try``, so an alarm that lands as ``fn`` returns is still caught)."""
    try:
        with time_limited(time_limit_s):
            value = fn(*args, **kwargs)
        return PathOutcome(ok=True, value=value)
    except TimeLimitReached as e:
        where = f" in {e.step}" if e.step else ""
        return PathOutcome(ok=False, error=PathError(
            stage=stage, code=PATH_TIME_LIMIT, type="TimeLimitReached",
            message=f"the {artifact} path ran past its time limit of {e.seconds:g} s{where}, and was stopped there "
                    "so that the other paths' results are reported", hint=hint_for(artifact, e)))
    except PathSkipped as e:
        # value: what the path learnt before it stopped (the ONNX -> torch conversion), or None
        conversion = getattr(e, "conversion", None)
        if out_of_memory(e):  # not a skip: the same model would convert with more memory
            return PathOutcome(ok=False, value=conversion, error=PathError(
                stage=e.stage, code=OUT_OF_MEMORY, type="MemoryError", message=scrub(f"out of memory: {e.message}"),
                hint=memory_hint()))
        return PathOutcome(ok=False, skipped=True, value=conversion, error=PathError(
            stage=e.stage, code=e.code, type="PathSkipped", message=scrub(e.message), hint=e.hint))
    except QuantCompareError as e:
        return PathOutcome(ok=False, error=PathError(stage=stage, code=e.code, type=type(e).__name__,
                                                     message=scrub(e.message), hint=e.hint))
    except Exception as e:  # noqa: BLE001 - a path fails alone, by design
        disk_full = error_from_os(e, f"the {artifact} path wrote its files")
        if isinstance(disk_full, DiskFull):  # not this path's failure: every later write fails too
            raise disk_full from e
        log.warning("path %s failed at %s:\n%s", artifact, stage, traceback.format_exc())
        first = _summary(str(e).strip()) or repr(e)
        if len(first) > 600:
            first = first[:600] + " ..."
        if out_of_memory(e):
            return PathOutcome(ok=False, error=PathError(stage=stage, code=OUT_OF_MEMORY, type="MemoryError",
                                                         message=scrub(f"out of memory: {first}"), hint=memory_hint()))
        return PathOutcome(ok=False, error=PathError(stage=stage, code="path_failed", type=type(e).__name__, message=scrub(first),
                                                     hint=hint_for(artifact, e)))


def address_space_limit(memory_mb: int):
    """A ``preexec_fn`` for a child process: RLIMIT_AS of ``memory_mb`` MiB (0: the limit it inherits)."""
    def apply() -> None:
        if memory_mb:
            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply
