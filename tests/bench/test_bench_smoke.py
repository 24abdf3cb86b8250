"""Smoke test of the benchmark (issue 8): ``bench/run.py --smoke`` end to end, no timing assertions.

It runs the by-hand baseline and the CLI once each on conv_relu with tiny counts (fresh processes,
so ~10-20 s on a loaded 2-core machine: two torch imports) and checks that the table prints and that
its numbers are sane: positive times, ratios that are finite, and the by-hand baseline computing
the same SQNR as the CLI (the two do the same work on the same samples).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke_prints_a_sane_table(tmp_path):
    raw = tmp_path / "raw.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--no-record", "--json", str(raw),
         "--workdir", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "| model | runs | by hand s | CLI s |" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("| conv_relu | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    by_hand, cli = float(cells[2]), float(cells[3])
    assert 0 < by_hand < 600 and 0 < cli < 600
    ratio = float(re.match(r"([\d.]+)x", cells[6]).group(1))
    assert 0.05 < ratio < 20

    import json

    data = json.loads(raw.read_text())
    row = data["rows"][0]
    steps = row["by_hand_steps"]
    assert steps["import"] > 0 and steps["fp32 export"] > 0 and steps["in-process total"] > 0
    assert all(v is None or v >= 0 for v in row["cli_timings"].values())
    assert {"prepare", "fp32", "quantize", "optimize", "evaluate"} <= set(row["cli_timings"])
    # Same samples, same work: by hand and the CLI agree on what PT2E and ORT do to accuracy.
    bh, cl = row["sqnr_all"]["by_hand"], row["sqnr_all"]["cli"]
    for art in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        assert bh[art] is not None and cl[art] is not None and bh[art] > 10
        assert abs(bh[art] - cl[art]) < 0.5, (art, bh[art], cl[art])
    assert row["rss_by_hand_mb"] > 50 and row["rss_cli_mb"] > 50
