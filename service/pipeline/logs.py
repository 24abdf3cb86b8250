"""Quiet the toolchains' own chatter; the report says what matters.

torch configures its loggers when it is imported (``torch._logging``), so levels set before the
import are overwritten: this imports torch first, then sets them. Call it once per process that
runs comparisons (the CLI, each worker).
"""

from __future__ import annotations

import logging
import warnings

_NOISY = ("torch", "torchao", "onnxscript", "onnx_ir", "onnxruntime", "root")


def quiet_toolchain_logs() -> None:
    warnings.filterwarnings("ignore")
    import torch  # noqa: F401 - must be imported before its loggers can be configured

    for name in _NOISY:
        logging.getLogger(None if name == "root" else name).setLevel(logging.ERROR)
