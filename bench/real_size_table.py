"""Issue 16's tables from one bench run's raw JSON (``bench/real_size.sh`` writes var/bench/real_size/):
prints Markdown.

    python bench/real_size_table.py [var/bench/real_size]

Reads ``cost_curve.json`` (bench/cost_curve.py), ``big_archive.json`` (cost_curve.py --big-gb) and
``resnet18.json`` (bench/run.py --models resnet18 --json), whichever exist.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def _slope(rows):
    """Least-squares job seconds per input MB, and the R^2 of a straight line through them."""
    xs = [r["input_mb"] for r in rows]
    ys = [r["job_s"] for r in rows]
    n = len(xs)
    if n < 2:
        return None, None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx
    a = my - b * mx
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return b, 1 - ss_res / ss_tot if ss_tot else 1.0


def cost_rows(rows) -> list[str]:
    out = ["| model | input MB | job s | s / MB | fp32 inference ms | job in fp32 inference-times | peak RSS MB (warm base) | "
           "RSS growth / model | disk MB | disk / (input + quantized) | timed graphs / runs (noisy) | quantize s | evaluate s | "
           "layers s | advice s | paths ok |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r.get('size', r['model'])} | error: {r['error'].strip().splitlines()[-1][:120]} |" + " |" * 14)
            continue
        st = r["stages"]
        ok = sum(1 for v in r["paths"].values() if v == "ok")
        growth = (r["peak_rss_mb"] - r["base_rss_mb"]) / r["input_mb"] if r["input_mb"] else None
        out.append(
            f"| {r['size']} | {r['input_mb']:.1f} | {r['job_s']:.1f} | {r['job_s'] / r['input_mb']:.2f} | "
            f"{r['fp32_ms']:.2f} | {r['inference_times']:.0f} | {r['peak_rss_mb']:.0f} ({r['base_rss_mb']:.0f}) | "
            f"{_f(growth, '.2f')}x | {r['disk_mb']:.1f} | {r['disk_ratio']:.2f}x | "
            f"{r['graphs_timed']} / {r['timed_runs']} ({r['noisy_latencies']}) | {st.get('quantize', 0):.1f} | "
            f"{st.get('evaluate', 0):.1f} | {st.get('layers', 0):.1f} | {st.get('advice', 0):.1f} | {ok}/{len(r['paths'])} |")
    return out


def main(argv=None) -> int:
    folder = Path((argv or sys.argv[1:] or ["var/bench/real_size"])[0])
    lines: list[str] = []
    cc = folder / "cost_curve.json"
    if cc.exists():
        data = json.loads(cc.read_text())
        rows = data["rows"]
        lines += ["### Cost curve (`bench/cost_curve.py`)", ""] + cost_rows(rows) + [""]
        built = [r for r in rows if "error" not in r and "(built)" in r.get("size", "")]
        b, r2 = _slope(built)
        if b is not None:
            lines.append(f"Built models: job time grows by **{b:.2f} s per MB** of model (least squares over "
                         f"{len(built)} sizes, R^2 = {r2:.3f}).")
            lines.append("")
        checks = [(r["size"], k, v) for r in rows if "error" not in r for k, v in r.get("latency_check", {}).items()]
        if checks:
            lines += ["Latency truth: the report's median vs an independent 7-run median (fresh session, 3 untimed runs):", "",
                      "| model | graph | report ms | independent ms | ratio | runs | noisy |", "|---|---|---|---|---|---|---|"]
            for size, k, v in checks:
                lines.append(f"| {size} | {k} | {v['report_ms']:.3f} | {v['independent_7run_ms']:.3f} | "
                             f"{v['ratio']:.2f} | {v['runs']} | {'yes: ' + '; '.join(v['noisy_reasons']) if v['noisy'] else 'no'} |")
            lines.append("")
    big = next((p for p in (folder / "big_archive.json", folder / "big_archive_1gb.json") if p.exists()), None)
    if big is not None:
        rows = json.loads(big.read_text())["rows"]
        lines += ["### A model of 1 GB+ with external data, uploaded as a .zip (archive path)", ""] + cost_rows(rows) + [""]
        for r in rows:
            if "error" not in r:
                lines.append(f"Peak worker RSS {r['peak_rss_mb']:.0f} MB = **{r['peak_rss_over_model']:.2f}x** the "
                             f"{r['input_mb']:.0f} MB model (target <= 3x).")
        lines.append("")
    rn = folder / "resnet18.json"
    if rn.exists():
        data = json.loads(rn.read_text())
        lines += ["### resnet18: warm service vs the by-hand script (`bench/run.py --models resnet18`)", "",
                  "| model | runs | by hand s | CLI s | service warm s | service / by hand | target | service evaluate s | by hand numerics + latency s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in data["rows"]:
            steps = r.get("by_hand_steps") or {}
            lines.append(f"| {r['model']} | {r['runs']} | {_f(r['by_hand_s'], '.2f')} | {_f(r['cli_s'], '.2f')} | "
                         f"{_f(r['service_s'], '.2f')} | {_f(r['service_ratio'], '.2f')}x | <= 0.4x | "
                         f"{_f((r.get('service_timings') or {}).get('evaluate'), '.2f')} | "
                         f"{_f((steps.get('numerics') or 0) + (steps.get('latency') or 0), '.2f')} |")
        lines.append("")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
