"""ONNX Runtime sessions, made one way everywhere in the service.

``session_options_for`` is the only place that builds ``SessionOptions``: the level, a fixed
intra-op thread count (latency is only comparable with threads fixed), quiet logs, and a cap on
what constant folding may materialize (a crafted model can otherwise fold a small graph into
gigabytes of initializers while the session is created).
"""

from __future__ import annotations

import mmap
import subprocess
import sys
import threading
from pathlib import Path

from service.errors import OrtWouldAbort
from service.schemas.options import LEVEL_VALUES
from service.pipeline.ort.aborts import ABORT_SOURCE, qdq_propagation_abort

# Cap on one tensor produced by ConstantFolding while the session is created.
CONSTANT_FOLDING_MAX_BYTES = 64 * 1024 * 1024
PROVIDERS = ["CPUExecutionProvider"]
# Initializers at least this big go to the external file of an optimized graph.
EXTERNAL_MIN_BYTES = 1024


def session_options_for(level: str, *, intra_op_threads: int = 1, optimized_model_path: Path | None = None,
                        disabled_optimizers: list[str] | None = None, external_initializers_file: str | None = None,
                        memory_arena: bool = True, session_config: dict[str, str] | None = None):
    """``SessionOptions`` for one ``GraphOptimizationLevel`` (``disable_all`` ... ``all``).

    ``optimized_model_path``: ORT writes the graph it will run there while the session is
    created (levels above ``extended`` hold hardware-specific rewrites; ORT warns, we silence it).
    ``disabled_optimizers``: GraphTransformer names to switch off (attribution).
    ``external_initializers_file``: the optimized graph keeps its initializers (>= 1 KiB) in this
    file next to it, so the graph itself parses in milliseconds and the weights can be dropped.
    ``memory_arena=False``: tensors are freed after each run instead of kept in the session's
    arena (for sessions that expose every intermediate tensor: an arena holds all of them).
    ``session_config``: the job's ORT session config entries (``options.ort_session``, keys of
    ``ORT_SESSION_ENTRIES`` only, validated there), set after the service's own, which they never name.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel(LEVEL_VALUES[level])
    so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 4  # a failing run's error comes back as the exception, which the report keeps
    so.enable_cpu_mem_arena = memory_arena
    so.add_session_config_entry("optimization.constant_folding_max_output_size_in_bytes",
                                str(CONSTANT_FOLDING_MAX_BYTES))
    if optimized_model_path is not None:
        so.optimized_model_filepath = str(optimized_model_path)
    if optimized_model_path is not None and external_initializers_file:
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    external_initializers_file)
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                    str(EXTERNAL_MIN_BYTES))
    for key, value in (session_config or {}).items():
        so.add_session_config_entry(key, str(value))
    if disabled_optimizers:
        # ';' between names: the installed ORT 1.32 reads a ','-joined list as one unknown name and switches
        # nothing off (onnxruntime_session_options_config_keys.h still says "comma separated"; pinned by
        # tests/pipeline/test_vocabulary.py, which switches two names off at once).
        so.add_session_config_entry("optimization.disable_specified_optimizers", ";".join(disabled_optimizers))
    return so


# Every job sets ORT's process-wide seed to this before its first session (onnxruntime.set_seed): an
# unseeded random op then draws the same numbers in every job (its node index is added to the seed).
JOB_RANDOM_SEED = 0


def quiet_ort_logs() -> None:
    """ORT's default logger at errors only: the sessions onnxruntime.quantization makes itself (with its
    own options) print warnings such as "Removing initializer ..." into the CLI's output otherwise."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)


def seed_random_ops() -> None:
    """ORT's process-wide seed (core/framework/random_seed.cc) set to JOB_RANDOM_SEED; each unseeded
    random kernel reads it, plus its node index, when its session is made (cpu/generator/random.h)."""
    import onnxruntime as ort

    ort.set_seed(JOB_RANDOM_SEED)


def session_for(model: Path | str | bytes, level: str, **kw):
    """A CPU EP ``InferenceSession`` for ``model`` (a path or serialized bytes) at ``level``."""
    return session_with_options(model, session_options_for(level, **kw))


def session_with_options(model: Path | str | bytes, so):
    """A CPU EP ``InferenceSession`` with options that ``session_options_for`` made (plus entries).
    Raises OrtWouldAbort, before ORT sees the file, when ORT would abort the process on it
    (``ort_aborts``; checked only for files that hold control flow, confirmed in a child process)."""
    import onnxruntime as ort

    if not isinstance(model, bytes) and so.graph_optimization_level != ort.GraphOptimizationLevel.ORT_DISABLE_ALL:
        refuse_if_ort_aborts(Path(model), so)
    return _inference_session(model, so)


def _inference_session(model: Path | str | bytes, so):
    import onnxruntime as ort

    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), so, providers=PROVIDERS)


# A node's op_type as protobuf writes it (field 4, length, name): a file without these bytes holds no
# If/Loop/Scan, so no body reads a tensor implicitly and it is not parsed at all.
_CONTROL_FLOW_BYTES = (b"\x22\x02If", b"\x22\x04Loop", b"\x22\x04Scan")
_PROBE_TIMEOUT_S = 600
_aborts_cache: dict[tuple, str | None] = {}  # (path, size, mtime, level) -> the refusal, or None
_predicted: dict[tuple, str | None] = {}  # (path, size, mtime) -> the tensor ort_aborts names, or None
_cache_lock = threading.Lock()

# The child makes the session the way this module does, without the check (it is the check).
_PROBE = """
import sys
from service.pipeline.ort.sessions import _inference_session, session_options_for
_inference_session(sys.argv[1], session_options_for(sys.argv[2]))
"""


def refuse_if_ort_aborts(path: Path, so) -> None:
    """OrtWouldAbort when ``ort_aborts`` predicts an abort for the file at ``so``'s level and a child
    process creating that session dies of a signal; a prediction the child refutes is ignored."""
    import onnx

    try:
        st = path.stat()
    except OSError:
        return  # ORT says what is wrong with the path
    try:
        disabled = so.get_session_config_entry("optimization.disable_specified_optimizers")
    except RuntimeError:  # no such entry: nothing disabled
        disabled = ""
    if st.st_size == 0 or "QDQPropagationTransformer" in disabled.replace(",", ";").split(";"):
        return
    level = int(so.graph_optimization_level)
    file_key = (str(path), st.st_size, st.st_mtime_ns)
    key = (*file_key, level)
    with _cache_lock:
        if key in _aborts_cache:
            cached = _aborts_cache[key]
            if cached:
                raise OrtWouldAbort(cached, hint=_ABORT_HINT)
            return
        predicted = _predicted.get(file_key, False)
    if predicted is False:  # one scan (and at most one parse) per file, whatever the levels
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            holds_control_flow = any(data.find(b) >= 0 for b in _CONTROL_FLOW_BYTES)
        predicted = qdq_propagation_abort(onnx.load(str(path), load_external_data=False)) if holds_control_flow else None
        with _cache_lock:
            _predicted[file_key] = predicted
    verdict = None
    if predicted is not None:
        try:
            name = next(n for n, v in LEVEL_VALUES.items() if v == level)
            child = subprocess.run([sys.executable, "-c", _PROBE, str(path), name], capture_output=True,
                                   timeout=_PROBE_TIMEOUT_S)
            died = child.returncode < 0
        except subprocess.TimeoutExpired:
            died = False  # no evidence of an abort: the session is made here
        if died:
            verdict = (f"ONNX Runtime aborts the process (signal {-child.returncode}) creating a session at this "
                       f"level, checked in a separate process: its QDQPropagationTransformer carries a "
                       f"DequantizeLinear through Reshape, Transpose or Slice to '{predicted}', which an If, Loop or "
                       f"Scan body reads from outside, and indexes that reader's inputs out of range ({ABORT_SOURCE})")
    with _cache_lock:
        _aborts_cache[key] = verdict
    if verdict:
        raise OrtWouldAbort(verdict, hint=_ABORT_HINT)


_ABORT_HINT = ("deploying this file at this level aborts the process too; create the session with "
               "add_session_config_entry('optimization.disable_specified_optimizers', 'QDQPropagationTransformer'), "
               "or at level disable_all")


class RunPastDeadline(Exception):
    """ORT stopped a run at our request once it had run ``seconds`` of wall time."""

    def __init__(self, seconds: float):
        super().__init__(f"stopped after {seconds:g} s")
        self.seconds = seconds


def run_within(session, feed: dict, seconds: float | None, output_names: list[str] | None = None) -> list:
    """``session.run(output_names, feed)``, stopped by ORT once ``seconds`` have passed: RunPastDeadline.

    A timer thread sets ``RunOptions.terminate`` (``session.run`` releases the GIL). ORT checks that flag before
    each step of the plan it runs (sequential_executor.cc ``RunSince``: "Exiting due to terminate flag being set
    to true"), and a Loop hands the same flag to every iteration's ``utils::ExecuteSubgraph`` (controlflow/
    loop.cc), so a run inside a 10^12-trip Loop stops within one body node of the deadline. A Loop whose body
    holds no node is never checked (pinned in tests/pipeline/fp32/test_run_deadline.py): the safety check refuses
    one whose trip count is not a constant (onnx_checks). One long kernel is not interrupted either; the
    activation budget bounds what one kernel can be given.
    """
    if seconds is None:
        return session.run(output_names, feed)
    import onnxruntime as ort

    run_options = ort.RunOptions()
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        run_options.terminate = True

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    try:
        return session.run(output_names, feed, run_options)
    except Exception as e:
        if fired.is_set():
            raise RunPastDeadline(seconds) from e
        raise
    finally:
        timer.cancel()


def ort_refusal(model: Path | str) -> Exception | None:
    """ORT's refusal to load ``model`` at ``disable_all`` (the least it asks of a file), or None.
    A path whose file ORT refuses would fail alike at every level under an "ok" path."""
    try:
        session_for(model, "disable_all")
    except Exception as e:  # noqa: BLE001 - ORT's refusal is the finding
        return e
    return None
