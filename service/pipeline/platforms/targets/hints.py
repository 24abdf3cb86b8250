"""What to do when a target refuses a file, read from the target's own error, and how a silent fallback to
ORT's CPU EP is recognised. Each pattern is one measured on this machine (shared notes, targets.md): QNN 2.51
through onnxruntime-qnn 2.7.0, OpenVINO 2026.4.1."""

from __future__ import annotations

__all__ = ["openvino_hint", "qnn_fallback", "qnn_hint", "short_error"]

# soc_model 0 is what QNN's op trace writes when no chip is named.
NO_CHIP = (None, "", "0")


def short_error(error: str, limit: int = 240) -> str:
    """The line of a target's error that says what failed (ORT wraps QNN's in '[ONNXRuntimeError] : 11 : ...')."""
    text = " ".join(error.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def qnn_hint(error: str, soc: str | None) -> str:
    if ("MEM_ALLOC" in error or "Failed to finalize QNN graph" in error) and soc in NO_CHIP:
        return ("QNN could not finalize the graph without a chip: name one (qnn:<soc_model>, e.g. qnn:69); with any "
                "soc_model it compiles")
    if "NHWC format" in error and "not selected" in error:
        return ("QNN's layout transform inserted an NHWC node that the QNN EP then did not take (MaxPool between "
                "QLinear ops): QNN's documented input is the QDQ format: deploy a QDQ file")
    if "Failed to finalize QNN graph" in error:
        return "QNN could not build an op of this file for this chip: the QNN log names it; try another soc_model"
    return "QNN refused the file: QNN's documented input is a QDQ file with static shapes"


def qnn_fallback(trace: dict | None, stderr: str, free_dims: dict[str, int]) -> str | None:
    """Why QNN ran nothing although the session was created (ORT then runs every node on its CPU EP and says
    nothing): no op trace at all (the backend did not load), or an op trace that took no node."""
    if trace is None:
        said = next((ln.strip() for ln in stderr.splitlines() if "Unable to load backend" in ln
                     or "SetupBackend failed" in ln), "")
        said = said[said.find("QNN SetupBackend"):] if "QNN SetupBackend" in said else said
        return ("silent fallback: QNN's backend did not run (it wrote no op trace) and ONNX Runtime ran every node on "
                f"its CPU EP{': ' + short_error(said, 300) if said else ''}")
    summary = trace.get("summary") or {}
    if summary.get("supported_nodes"):
        return None
    reasons = {u.get("reason", "") for u in trace.get("unsupported_nodes") or []}
    if any("Cannot get shape" in r for r in reasons):
        return ("silent fallback: QNN took no node because it cannot get the shapes of a graph with dynamic dims "
                f"(fixed here: {free_dims or 'none'}); ONNX Runtime ran every node on its CPU EP")
    return ("silent fallback: QNN took none of the graph's "
            f"{summary.get('total_onnx_nodes', '?')} nodes and ONNX Runtime ran them all on its CPU EP "
            f"({'; '.join(sorted(reasons))[:300] or 'no reason given'})")


def openvino_hint(error: str) -> str:
    if "scale_dim.compatible" in error or "QLinearConv" in error:
        return ("OpenVINO's ONNX frontend cannot convert this QOperator file (per-channel QLinearConv weights): give "
                "OpenVINO the QDQ file")
    if "OpConversionFailure" in error:
        return "OpenVINO's ONNX frontend has no conversion for an op of this file: the message names it"
    return "OpenVINO refused the file: the message is OpenVINO's own"
