"""Exclude and retry: re-quantize with the k worst origin nodes left in float, and measure what
that buys (worst output SQNR at ``disable_all``) and costs (median latency at ``all``).

Each tool's own filter does the excluding: ORT's ``quantize_static(nodes_to_exclude=...)`` with
the fp32 node names (ORT keeps them), and PT2E's ``XNNPACKQuantizer`` per-module config set to None
with the torch module the node came from (``pkg.torch.onnx.name_scopes``, written by
``torch.onnx.export``); a node with no module scope (a functional op at the top level of a .pt2)
cannot be excluded in PT2E and is listed as skipped. On an ONNX upload the converter's FX nodes
carry the ONNX node they came from, and those lose their XNNPACK annotation instead. A node ORT's
pre-processing renamed is found by the output it writes.

``advice_from_retry`` turns the result into the plain dicts the ``advice`` list (advice/advice)
consumes; the shape is pinned in docs/CONTRACTS.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from service.pipeline.quantize.ort_quant import quantized_by_ort
from service.pipeline.quantize.pt2e import Pt2eInput, qdq_from_pt2e
from service.pipeline.runtime.latency import latency_from_times, timed_run
from service.pipeline.runtime.numerics import concat_runs, worst_elementwise_sqnr
from service.pipeline.ort.sessions import session_for
from service.pipeline.time_limit import TimeLimitReached, time_limited
from service.schemas.layers import LayersReport, LayersRetry, RetryArtifact

# ops a quantizer quantizes for their own sake; a data-movement op is never worth excluding
_EXCLUDABLE = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "Sigmoid", "Softmax", "Concat",
               "AveragePool", "GlobalAveragePool", "LeakyRelu", "Relu", "Clip", "BatchNormalization"}


@dataclass(frozen=True)
class RetryInputs:
    """What re-quantizing needs, as the spine already holds it.

    ``requantize(artifact, nodes, out_path) -> str``: writes the artifact again with ``nodes``
    (fp32 node names) left in float and returns how it did so; raises to report a failure.
    """

    fp32_path: Path
    artifact_paths: dict[str, Path]
    eval_feeds: list[dict[str, np.ndarray]]
    requantize: Callable[[str, list[str], Path], str]
    out_dir: Path
    intra_op_threads: int = 1
    latency_runs: int = 10
    data_dependent: frozenset[int] = frozenset()  # output positions after a selection: no SQNR on them
    # The job's ORT session config entries (options.ort_session), on the timed sessions at "all" as the levels
    # stage's; the SQNR runs are at disable_all, where none of them changes anything.
    session_config: dict[str, str] = field(default_factory=dict)


def worst_origin_nodes(layers: LayersReport, artifact: str, k: int) -> list[str]:
    """fp32 node names of the k largest SQNR drops of ``artifact`` at compute ops."""
    nodes: list[str] = []
    for o in sorted((o for o in layers.origins if o.artifact == artifact), key=lambda o: -o.drop_db):
        if o.node and o.op_type in _EXCLUDABLE and o.node not in nodes:
            nodes.append(o.node)
        if len(nodes) == k:
            break
    return nodes


def retry_without_origins(layers: LayersReport, inputs: RetryInputs, *, k: int, max_seconds: float) -> LayersRetry:
    t0 = time.perf_counter()
    done, skipped = [], []
    reference = _outputs(inputs.fp32_path, inputs.eval_feeds)
    for artifact, path in inputs.artifact_paths.items():
        if artifact == "fp32":
            continue
        nodes = worst_origin_nodes(layers, artifact, k)
        if not nodes:
            skipped.append(f"{artifact}: no origin at a quantized compute op")
            continue
        if time.perf_counter() - t0 > max_seconds:
            skipped.append(f"{artifact}: time budget spent (options.layers.retry_seconds={max_seconds:g})")
            continue
        out = inputs.out_dir / f"{artifact}.retry.onnx"
        try:
            # A re-quantization (PT2E above all) may run as long as the first one did: bounded by what is left.
            with time_limited(max(max_seconds - (time.perf_counter() - t0), 1e-3)):
                how = inputs.requantize(artifact, nodes, out)
        except TimeLimitReached:
            done.append(RetryArtifact(artifact=artifact, excluded_nodes=nodes, how="", error=(
                f"stopped at the time budget (options.layers.retry_seconds={max_seconds:g}) while re-quantizing")))
            continue
        except Exception as e:  # noqa: BLE001 - one tool failing leaves the others' results
            done.append(RetryArtifact(artifact=artifact, excluded_nodes=nodes, how="", error=f"{type(e).__name__}: {e}"[:300]))
            continue
        before = _worst_sqnr(reference, _outputs(path, inputs.eval_feeds), inputs.data_dependent)
        after = _worst_sqnr(reference, _outputs(out, inputs.eval_feeds), inputs.data_dependent)
        lat_before = _latency(path, inputs)
        lat_after = _latency(out, inputs)
        done.append(RetryArtifact(artifact=artifact, excluded_nodes=nodes, how=how, sqnr_db_before=before,
                                  sqnr_db_after=after, latency_ms_before=lat_before, latency_ms_after=lat_after))
    return LayersRetry(k=k, seconds=round(time.perf_counter() - t0, 4), artifacts=done, skipped=skipped)


def advice_from_retry(retry: LayersRetry | None) -> list[dict]:
    """One advice item per retried artifact: ``{"code", "artifact", "message", "evidence"}``.

    ``code`` is ``exclude_nodes_from_quantization`` when keeping the nodes in float gained at
    least 1 dB of worst-output SQNR, ``exclusion_did_not_help`` otherwise.
    """
    items = []
    for r in (retry.artifacts if retry else []):
        if r.error or r.sqnr_db_before is None or r.sqnr_db_after is None:
            continue
        gain = r.sqnr_db_after - r.sqnr_db_before
        slower = (f"{r.latency_ms_before:.3g} -> {r.latency_ms_after:.3g} ms"
                  if r.latency_ms_before is not None and r.latency_ms_after is not None else "latency not measured")
        helped = gain >= 1.0
        items.append({
            "code": "exclude_nodes_from_quantization" if helped else "exclusion_did_not_help",
            "artifact": r.artifact,
            "message": (f"{r.artifact}: keeping {', '.join(r.excluded_nodes)} in float "
                        f"({r.how}) moves the worst output SQNR {r.sqnr_db_before:.1f} -> {r.sqnr_db_after:.1f} dB "
                        f"({gain:+.1f} dB); latency at 'all' {slower}"),
            "evidence": {"excluded_nodes": list(r.excluded_nodes), "how": r.how, "sqnr_db_before": r.sqnr_db_before,
                         "sqnr_db_after": r.sqnr_db_after, "latency_ms_before": r.latency_ms_before,
                         "latency_ms_after": r.latency_ms_after},
        })
    return items


def module_of_node(fp32_model, node_name: str) -> str | None:
    """The torch module a node of a torch-exported ONNX file came from (its innermost scope that
    is a module, i.e. all but the last name scope, which is the op's own FX name)."""
    for n in fp32_model.graph.node:
        if n.name != node_name:
            continue
        for p in n.metadata_props:
            if p.key == "pkg.torch.onnx.name_scopes":
                scopes = [s.strip().strip("'\"") for s in p.value.strip("[]").split(",")]
                scopes = [s for s in scopes[:-1] if s]
                return scopes[-1] if scopes else None
    return None


def _nodes_in(model, fp32_model, nodes: list[str]) -> list[str]:
    """The names ``nodes`` (of the fp32 model) have in ``model``, the file ORT quantizes: the same name,
    or the node that writes the same output (quant_pre_process fuses MatMul + Add into a Gemm named
    '<MatMul>/MatMulAddFusion' that writes the Add's output)."""
    names = {n.name for n in model.graph.node}
    writer = {o: n.name for n in model.graph.node for o in n.output if o}
    outputs = {n.name: [o for o in n.output if o] for n in fp32_model.graph.node}
    kept: list[str] = []
    for name in nodes:
        found = name if name in names else next((writer[o] for o in outputs.get(name, []) if o in writer), None)
        if found and found not in kept:
            kept.append(found)
    return kept


def _outputs(path: Path, feeds) -> list[np.ndarray]:
    session = session_for(path, "disable_all")
    names = {i.name for i in session.get_inputs()}
    return concat_runs([session.run(None, {k: v for k, v in f.items() if k in names}) for f in feeds])


def _worst_sqnr(reference: list[np.ndarray], actual: list[np.ndarray], data_dependent: frozenset[int]) -> float | None:
    worst = worst_elementwise_sqnr(reference, actual, data_dependent)
    return None if worst is None else round(worst, 4)


def _latency(path: Path, inputs: RetryInputs) -> float | None:
    session = session_for(path, "all", intra_op_threads=inputs.intra_op_threads, session_config=inputs.session_config)
    names = {i.name for i in session.get_inputs()}
    feed = {k: v for k, v in inputs.eval_feeds[0].items() if k in names}
    for _ in range(2):  # warm-up
        session.run(None, feed)
    ms = [timed_run(lambda: session.run(None, feed), inputs.intra_op_threads)[1].ms for _ in range(inputs.latency_runs)]
    return round(latency_from_times(ms, warmup=2, intra_op_threads=inputs.intra_op_threads).median_ms, 4)


def requantizer(*, source, shapes, calibration, input_names: list[str], ort_input: Path, ort_settings: dict,
                per_channel: bool, fp32_model) -> Callable[[str, list[str], Path], str]:
    """The ``RetryInputs.requantize`` for the spine's three paths, with the same settings and
    calibration samples as the first run."""

    pt2e = Pt2eInput(source, shapes, calibration, per_channel=per_channel)

    def run(artifact: str, nodes: list[str], out: Path) -> str:
        if artifact == "pt2e_qdq" and source.program is None:  # an ONNX upload, through the converter
            qdq_from_pt2e(replace(pt2e, skip_onnx_nodes=tuple(nodes)), out)
            return "XNNPACKQuantizer annotations removed from the nodes converted from " + ", ".join(nodes)
        if artifact == "pt2e_qdq":
            modules = {n: module_of_node(fp32_model, n) for n in nodes}
            missing = [n for n, m in modules.items() if not m]
            if missing:
                raise ValueError(f"no torch module scope for {', '.join(missing)}: "
                                 "XNNPACKQuantizer.set_module_name cannot leave it in float")
            qdq_from_pt2e(replace(pt2e, skip_modules=tuple(sorted(set(modules.values())))), out)
            return "XNNPACKQuantizer module_name_config[" + ", ".join(sorted(set(modules.values()))) + "] = None"
        if artifact not in ("ort_qdq", "ort_qoperator"):  # a tool path or a brought file: no re-run of ours
            raise ValueError(f"{artifact} is not re-quantized here: its tool's own settings leave nodes in float")
        import onnx

        kept = _nodes_in(onnx.load(str(ort_input), load_external_data=False), fp32_model, nodes)
        if not kept:
            raise ValueError(f"none of {', '.join(nodes)} is a node of the file ORT quantizes, by name or by output")
        settings = {**ort_settings, "nodes_to_exclude": kept}
        quantized_by_ort(ort_input, out, calibration, input_names,
                         quant_format="qdq" if artifact == "ort_qdq" else "qoperator", settings=settings)
        return f"quantize_static(nodes_to_exclude={kept})"

    return run
