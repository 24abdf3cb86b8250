"""This machine | another platform, per artifact and level: int8 coverage, fused int8 kernels, layout
nodes and the blockers that differ, each difference named by the ORT rule that makes it.

The two rules are the ones ``targets.Platform`` carries, from ORT 1.32's source; a difference that
neither explains is said to be unexplained rather than given a reason.
"""

from __future__ import annotations

from service.pipeline.ort.targets import Platform, int8_allowed_in
from service.schemas.options import QDQ_IS_INT8_ALLOWED
from service.schemas.levels import OptimizedLevel
from service.schemas.platforms import PlatformReport, SideBySideRow

__all__ = ["RULE_INT8", "RULE_NCHWC", "side_by_side_rows"]

RULE_INT8 = ("QDQIsInt8Allowed(): {host} here, {other} on {name}; where it is false, Level2 first runs "
             "QDQS8ToU8Transformer (single-reader int8 Q/DQ pairs become uint8) and the Conv/MatMul selectors refuse "
             "int8 activations (qdq_selector_action_transformer.h, qdq_selectors.cc)")
RULE_NCHWC = ("NchwcTransformer: registered at Level3 only when MlasNchwcGetBlockSize() > 1, true on x86-64 only "
              "(graph_transformer_utils.cc): {host} here, {other} on {name}")
UNEXPLAINED = "unexplained: neither CPU rule of ORT's graph optimizer (int8 allowed, NCHWc) differs here"


def _layout(ol: OptimizedLevel) -> dict[str, int]:
    return {k: v for k, v in (("nchwc", ol.layout.nchwc_nodes), ("nhwc", ol.layout.nhwc_nodes)) if v}


def _blockers(ol: OptimizedLevel) -> set[str]:
    return {f"{r.node}: {r.blocker}" for r in ol.unfused}


def _yes(flag: bool) -> str:
    return "true" if flag else "false"


def side_by_side_rows(host: dict[str, dict[str, OptimizedLevel]], host_platform: Platform,
                      other: PlatformReport, session_config: dict[str, str] | None = None) -> list[SideBySideRow]:
    """``session_config``: the job's options.ort_session, which this machine's sessions ran with (the emulated
    platform's run with its defaults): a session.qdqisint8allowed there decides the int8 rule here."""
    rows = []
    int8_here = int8_allowed_in(session_config, host_platform.int8_allowed)
    said_here = _yes(int8_here) + (f" by {QDQ_IS_INT8_ALLOWED}={session_config[QDQ_IS_INT8_ALLOWED]} in this job's "
                                   f"sessions ({_yes(host_platform.int8_allowed)} by default)"
                                   if QDQ_IS_INT8_ALLOWED in (session_config or {}) else "")
    for artifact, per_level in other.optimized.items():
        for level, theirs in per_level.items():
            ours = host.get(artifact, {}).get(level)
            if ours is None or ours.error or theirs.error and not theirs.op_histogram:
                continue
            b_ours, b_theirs = _blockers(ours), _blockers(theirs)
            kernels_differ = ours.int8_kernels != theirs.int8_kernels or ours.int8_coverage != theirs.int8_coverage \
                or ours.kernel_activation_dtypes != theirs.kernel_activation_dtypes or b_ours != b_theirs
            layout_differs = _layout(ours) != _layout(theirs)
            rules = []
            if kernels_differ:
                rules.append(RULE_INT8.format(host=said_here, other=_yes(other.rules.int8_allowed), name=other.name)
                             if int8_here != other.rules.int8_allowed else UNEXPLAINED)
            if layout_differs:
                if ours.layout.nchwc_nodes != theirs.layout.nchwc_nodes and host_platform.nchwc != other.rules.nchwc:
                    rules.append(RULE_NCHWC.format(host=_yes(host_platform.nchwc), other=_yes(other.rules.nchwc),
                                                   name=other.name))
                if ours.layout.nhwc_nodes != theirs.layout.nhwc_nodes and not kernels_differ:
                    rules.append(UNEXPLAINED)
            rows.append(SideBySideRow(
                artifact=artifact, level=level, same=not (kernels_differ or layout_differs),
                host_int8_coverage=ours.int8_coverage, platform_int8_coverage=theirs.int8_coverage,
                host_kernels=ours.int8_kernels, platform_kernels=theirs.int8_kernels,
                host_layout_ops=_layout(ours), platform_layout_ops=_layout(theirs),
                blockers_host_only=sorted(b_ours - b_theirs), blockers_platform_only=sorted(b_theirs - b_ours),
                rules=list(dict.fromkeys(rules))))
    return rows
