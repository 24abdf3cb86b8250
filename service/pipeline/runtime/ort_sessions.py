"""ONNX Runtime sessions, made one way everywhere in the service.

``session_options_for`` is the only place that builds ``SessionOptions``: the level, a fixed
intra-op thread count (latency is only comparable with threads fixed), quiet logs, and a cap on
what constant folding may materialize (a crafted model can otherwise fold a small graph into
gigabytes of initializers while the session is created).
"""

from __future__ import annotations

from pathlib import Path

from service.pipeline.options import LEVEL_VALUES

# Cap on one tensor produced by ConstantFolding while the session is created.
CONSTANT_FOLDING_MAX_BYTES = 64 * 1024 * 1024
PROVIDERS = ["CPUExecutionProvider"]
# Initializers at least this big go to the external file of an optimized graph.
EXTERNAL_MIN_BYTES = 1024


def session_options_for(level: str, *, intra_op_threads: int = 1, optimized_model_path: Path | None = None,
                        disabled_optimizers: list[str] | None = None, external_initializers_file: str | None = None,
                        memory_arena: bool = True):
    """``SessionOptions`` for one ``GraphOptimizationLevel`` (``disable_all`` ... ``all``).

    ``optimized_model_path``: ORT writes the graph it will run there while the session is
    created (levels above ``extended`` hold hardware-specific rewrites; ORT warns, we silence it).
    ``disabled_optimizers``: GraphTransformer names to switch off (attribution).
    ``external_initializers_file``: the optimized graph keeps its initializers (>= 1 KiB) in this
    file next to it, so the graph itself parses in milliseconds and the weights can be dropped.
    ``memory_arena=False``: tensors are freed after each run instead of kept in the session's
    arena (for sessions that expose every intermediate tensor: an arena holds all of them).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel(LEVEL_VALUES[level])
    so.intra_op_num_threads = intra_op_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
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
    if disabled_optimizers:
        so.add_session_config_entry("optimization.disable_specified_optimizers", ",".join(disabled_optimizers))
    return so


def session_for(model: Path | str | bytes, level: str, **kw):
    """A CPU EP ``InferenceSession`` for ``model`` (a path or serialized bytes) at ``level``."""
    return session_with_options(model, session_options_for(level, **kw))


def session_with_options(model: Path | str | bytes, so):
    """A CPU EP ``InferenceSession`` with options that ``session_options_for`` made (plus entries)."""
    import onnxruntime as ort

    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), so, providers=PROVIDERS)


def ort_refusal(model: Path | str) -> Exception | None:
    """ORT's refusal to load ``model`` at ``disable_all`` (the least it asks of a file), or None.
    A path whose file ORT refuses would fail alike at every level under an "ok" path."""
    try:
        session_for(model, "disable_all")
    except Exception as e:  # noqa: BLE001 - ORT's refusal is the finding
        return e
    return None
