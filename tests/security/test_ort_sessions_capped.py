"""Every onnxruntime session the service creates itself goes through session_options_for (the
constant-folding cap). quantize_static / quant_pre_process build their own: see docs/security.md."""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"


# The emulated platforms' script runs under qemu with onnxruntime and numpy only, and QNN's in the target's
# own process, so neither can import service: each builds its own sessions, with the same cap (checked below).
OWN_SESSIONS = ("pipeline/ort/sessions.py", "pipeline/platforms/emulated_ort.py",
                "pipeline/platforms/targets/qnn_ort.py")


def test_sessions_are_only_built_in_ort_sessions():
    offenders = []
    for path in SERVICE.rglob("*.py"):
        if path.relative_to(SERVICE).as_posix() in OWN_SESSIONS:
            continue
        # Calls, read from the syntax tree: advice's recipe writes "ort.SessionOptions()" as text to paste.
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in ("InferenceSession", "SessionOptions"):
                    offenders.append(f"{path.relative_to(SERVICE)}:{node.lineno}: {name}(...)")
    assert offenders == []


def test_the_constant_folding_cap_is_set():
    from service.pipeline.ort.sessions import CONSTANT_FOLDING_MAX_BYTES, session_options_for

    from service.pipeline.platforms import emulated_ort
    from service.pipeline.platforms.targets import qnn_ort

    assert emulated_ort.CONSTANT_FOLDING_MAX_BYTES == qnn_ort.CONSTANT_FOLDING_MAX_BYTES == CONSTANT_FOLDING_MAX_BYTES
    so = session_options_for("all")
    assert so.get_session_config_entry("optimization.constant_folding_max_output_size_in_bytes") == \
        str(CONSTANT_FOLDING_MAX_BYTES)
