"""PT2E on ONNX uploads through the project's own converter, and what conversion costs.

For every fp32 ONNX model of the real-world corpus (already-quantized uploads are not quantized
again, so they are left out) this runs, in one process, on the job's own samples:
  ort      ORT CPU runs the fp32 file (the denominator: models ORT can run)
  after    quantize/pt2e_from_onnx (specialize -> build -> parity -> torch.export) -> PT2E -> QDQ ONNX
  ort_qdq  ORT quantize_static QDQ, for scale: the time of the path next to it
Times are wall-clock seconds (time.perf_counter) on this machine; `convert` is ONNX -> torch.export
program (with the parity run for `after`), `pt2e` is prepare/calibrate/convert + ONNX re-export.

Usage: .venv/bin/python bench/onnx_conversion.py [name ...]
(The onnx2torch column of the issue-12 table is history: that converter was removed.)
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SKIP = {"already_quantized_qdq", "already_quantized_qoperator", "already_quantized_dynamic"}


def _short(e: BaseException) -> str:
    text = getattr(e, "message", None) or str(e)
    return f"{type(e).__name__}: {' '.join(text.split())[:160]}"


def run(model, folder: Path) -> dict:
    import onnxruntime as ort

    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_quant import quantized_by_ort
    from service.pipeline.quantize.pt2e import Pt2eInput, _quantized_program
    from service.pipeline.inputs.samples import generated_samples
    from service.pipeline.inputs.sources import source_from_onnx
    from service.pipeline.inputs.specs import resolved_input_shapes

    row: dict = {"name": model.name}
    path = model.locate(folder / "built")
    source = source_from_onnx(path, name=model.name)
    options = ComparisonOptions.model_validate(model.options_with())
    shapes, _ = resolved_input_shapes(source.specs, options.input_shapes)
    samples = generated_samples(source.specs, shapes, options)
    names = [s.name for s in source.specs]
    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        sess.run(None, samples.evaluation[0])
        row["ort"] = "ok"
    except Exception as e:  # noqa: BLE001
        row["ort"] = f"no ({_short(e)})"
    t0 = time.perf_counter()
    try:
        quantized_by_ort(path, folder / f"{model.name}.ortqdq.onnx", samples.calibration, names, quant_format="qdq",
                         settings=resolved_ort_settings(options))
        row["ort_qdq"] = f"ok {time.perf_counter() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        row["ort_qdq"] = f"failed {time.perf_counter() - t0:.1f}s"
    variants = []
    from service.pipeline.quantize.pt2e_from_onnx.program import program_from_onnx as new

    variants.append(("after", lambda: new(source, shapes, calibration=samples.calibration,
                                          evaluation=samples.evaluation)))
    for label, make in variants:
        t0 = time.perf_counter()
        try:
            program, conversion = make()
        except Exception as e:  # noqa: BLE001
            row[label] = f"skip convert {time.perf_counter() - t0:.1f}s: {_short(e)}"
            conv = getattr(e, "conversion", None)
            if conv is not None and conv.max_abs_error_vs_onnx is not None:
                row[label] += f" (parity {conv.max_abs_error_vs_onnx:.2g})"
            continue
        convert_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            _quantized_program(program, conversion, Pt2eInput(source, shapes, samples.calibration),
                               folder / f"{model.name}.{label}.onnx")
            row[label] = f"ok convert {convert_s:.1f}s + pt2e {time.perf_counter() - t0:.1f}s"
            if conversion is not None:
                row[label] += f", parity {conversion.max_abs_error_vs_onnx:.2g}"
        except Exception as e:  # noqa: BLE001
            row[label] = f"fail pt2e (convert {convert_s:.1f}s): {_short(e)}"
    return row


def main(argv: list[str]) -> int:
    import logging

    logging.disable(logging.WARNING)
    from tests.realworld.corpus import CORPUS

    names = [a for a in argv if not a.startswith("--")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="onnxconv") as tmp:
        for model in CORPUS:
            if model.name in SKIP or (names and model.name not in names):
                continue
            try:
                row = run(model, Path(tmp))
            except Exception as e:  # noqa: BLE001
                row = {"name": model.name, "ort": f"error {_short(e)}"}
            rows.append(row)
            print(row, flush=True)
    cols = ["name", "ort", "after", "ort_qdq"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |")
    runnable = [r for r in rows if r.get("ort") == "ok"]
    ok = sum(1 for r in runnable if str(r.get("after", "")).startswith("ok"))
    print(f"PT2E QDQ file for {ok}/{len(runnable)} fp32 ONNX models ORT runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
