"""Pay the toolchains' first-call costs once per worker process, before the first job.

The first ``torch.export`` / ``torch.onnx.export`` in a process builds dispatch tables and the
onnxscript registry (~4 s here; later calls ~0.5 s), and ORT's first session loads its kernels.
A tiny comparison through the real pipeline warms every one of those paths.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.logs import quiet_toolchain_logs
from service.schemas.options import ComparisonOptions
from service.pipeline.quantize.exporter_cache import install_exporter_registry_cache

log = logging.getLogger("quantcompare.warmup")


def warm_up() -> float:
    quiet_toolchain_logs()
    install_exporter_registry_cache()
    t0 = time.perf_counter()
    options = ComparisonOptions(calibration_samples=2, eval_samples=1, latency={"enabled": False})
    with tempfile.TemporaryDirectory(prefix="quantcompare-warmup-") as d:
        run_comparison(ComparisonRequest(example="conv_relu", options=options), Path(d))
    seconds = time.perf_counter() - t0
    log.info("toolchains warmed up in %.1fs", seconds)
    return seconds
