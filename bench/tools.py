"""One run of each tool path on the quantizer trial's model, as a table (issue 50).

    python bench/tools.py [--runs 1] [--size 32]

Per preset: one ``quantcompare compare`` job (in this process, CLI-like: fresh samples, latency off) with
``ort_qdq`` beside the tool paths, on ``tests/models.py`` ``conv_gap_gemm``. Prints, per artifact: its
preset, the path's wall seconds (``artifacts.<name>.seconds``: the subprocess, its interpreter and imports
included), Q/DQ counts in the file, worst SQNR at ``all`` against fp32, the producer, and what the tool could not
match. A tool that is not installed prints its skip (``make tools``). Timing taken on a loaded machine is noise:
run it on an idle one, and say the load (printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRESETS = [
    {"nncf_qdq": "matched", "modelopt_qdq": "matched", "quark_qdq": "matched"},
    {"nncf_qdq": "default", "modelopt_qdq": "tensorrt", "quark_qdq": "a8w8"},
    {"quark_qdq": "xint8"},
]


def main() -> None:
    import onnx

    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    from tests.models import build

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'artifact':<14}{'preset':<10}{'seconds':>9}{'Q/DQ':>8}{'SQNR dB':>9}  producer / not matched")
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        onnx.save(build("conv_gap_gemm", size=args.size), fp32)
        for i, presets in enumerate(PRESETS):
            for run in range(args.runs):
                artifacts = ["ort_qdq", *presets] if i == 0 else list(presets)
                options = ComparisonOptions.model_validate({
                    "artifacts": artifacts, "tool_presets": presets, "latency": {"enabled": False},
                    "advice": {"enabled": False}, "layers": {"enabled": False}, "seed": run})
                report = run_comparison(ComparisonRequest(model_path=fp32, options=options),
                                        Path(tmp) / f"job{i}.{run}")
                for name in artifacts:
                    _row(report.artifacts[name], presets.get(name, "matched"))


def _row(art, preset: str) -> None:
    if art.status != "ok":
        print(f"{art.name:<14}{preset:<10}{'-':>9}{'-':>8}{'-':>9}  {art.status}: {art.error.code} ({art.error.hint})")
        return
    q = art.quantization
    sqnr = art.optimized["all"].numerics.worst_sqnr_db
    unmatched = "; ".join(s.split(" (")[0][:60] for s in art.tool.settings.get("not_matched", [])) or "-"
    print(f"{art.name:<14}{preset:<10}{art.seconds:>9.2f}{q.quantize_linear:>4}/{q.dequantize_linear:<3}"
          f"{sqnr:>9.2f}  {art.tool.producer or art.file.producer_name} | {unmatched}")


if __name__ == "__main__":
    main()
