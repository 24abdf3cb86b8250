"""The report page of a 1,000-node model: how long Graphviz and the page take on the server, and how long
Chromium takes to render it (issue 52: under 2 s).

    .venv/bin/python bench/report_page.py [--blocks 70] [--runs 3] [--keep DIR]

Builds a residual ONNX model in code (``--blocks`` x [Conv, Relu, Conv, Add, Relu] on 8 channels, 16x16),
compares it with the CLI (standard depth, few samples), then per run: renders the page from report.json
(``render_job_page``, Graphviz's layout cache cleared first: a cold page) and loads the page in headless
Chromium with the suite's flags, reading the navigation timing (load event end, first contentful paint) from
inside the page. Prints one table; the figures are the medians of ``--runs``. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.render.graphs.svg import svg_from_dot  # noqa: E402
from service.render.page import render_job_page  # noqa: E402
from tests.e2e.test_report_page_browser import FLAGS, chromium  # noqa: E402

TIMING = """<script>
addEventListener('load', () => setTimeout(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  const pre = document.createElement('pre'); pre.id = 'timing';
  pre.textContent = JSON.stringify({load: nav.loadEventEnd, dcl: nav.domContentLoadedEventEnd,
                                    fcp: fcp ? fcp.startTime : null, nodes: document.querySelectorAll('svg.graph g.node').length});
  document.body.appendChild(pre);
}, 0));
</script>"""


def residual_model(blocks: int, channels: int = 8) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for b in range(blocks):
        for k in (0, 1):
            w = numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32), f"w{b}_{k}")
            bias = numpy_helper.from_array(np.zeros(channels, np.float32), f"b{b}_{k}")
            inits += [w, bias]
        nodes += [helper.make_node("Conv", [x, f"w{b}_0", f"b{b}_0"], [f"c{b}_0"], pads=[1, 1, 1, 1], name=f"conv{b}_0"),
                  helper.make_node("Relu", [f"c{b}_0"], [f"r{b}_0"], name=f"relu{b}_0"),
                  helper.make_node("Conv", [f"r{b}_0", f"w{b}_1", f"b{b}_1"], [f"c{b}_1"], pads=[1, 1, 1, 1], name=f"conv{b}_1"),
                  helper.make_node("Add", [x, f"c{b}_1"], [f"a{b}"], name=f"add{b}"),
                  helper.make_node("Relu", [f"a{b}"], [f"h{b}"], name=f"relu{b}_1")]
        x = f"h{b}"
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 16, 16])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", channels, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def chromium_timing(html: Path, profile: Path) -> tuple[dict, float]:
    started = time.perf_counter()
    done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,800",
                           "--virtual-time-budget=20000", "--dump-dom", html.as_uri()],
                          capture_output=True, timeout=300, check=False)
    wall = time.perf_counter() - started
    m = re.search(r'<pre id="timing">(.*?)</pre>', done.stdout.decode("utf-8", "replace"), re.S)
    if not m:
        raise SystemExit(done.stderr.decode("utf-8", "replace")[-2000:])
    return json.loads(m[1].replace("&quot;", '"')), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=70)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle", type=float, default=0.5, help="wait for a 1-minute load under this before measuring")
    ap.add_argument("--keep", type=Path, default=None, help="folder for the model, report and page (default: a temp dir)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="qc-page-"))
    work.mkdir(parents=True, exist_ok=True)
    model = work / "residual.onnx"
    onnx.save(residual_model(args.blocks), model)
    out = work / "out"
    if not (out / "report.json").is_file():
        opts = {"input_shapes": {"x": [1, 8, 16, 16]}, "calibration_samples": 4, "eval_samples": 2,
                "latency": {"runs": 3, "warmup": 1}, "advice": {"enabled": False},
                "layers": {"enabled": False}}  # the page is what is timed: the per-tensor table only adds time here
        subprocess.run([sys.executable, "-m", "service.cli", "compare", str(model), "--options", json.dumps(opts),
                        "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    report = json.loads((out / "report.json").read_text())
    level = (report.get("headline") or {}).get("level") or "all"
    sizes = {n: a["optimized"][level]["node_count"] for n, a in report["artifacts"].items()
             if a.get("status") == "ok" and level in (a.get("optimized") or {})}
    from bench.job_budget import wait_idle

    load = wait_idle(args.idle)  # the job just kept a core busy
    rec = SimpleNamespace(id="bench", created_at=time.time(), stage=None, total=None, done=None)
    server, browser, walls, fcps = [], [], [], []
    html = ""
    for _ in range(args.runs):
        svg_from_dot.cache_clear()
        t = time.perf_counter()
        html = render_job_page(rec, report, [])
        server.append(time.perf_counter() - t)
        page = work / "page.html"
        page.write_text(html.replace("</body>", TIMING + "</body>"), encoding="utf-8")
        timing, wall = chromium_timing(page, work / "profile")
        browser.append(timing["load"] / 1000)
        fcps.append((timing["fcp"] or 0) / 1000)
        walls.append(wall)
    med = statistics.median
    print(f"| fp32 nodes | nodes at {level} per artifact | boxes drawn | page | server render (Graphviz, cold) | "
          "Chromium: first paint | Chromium: load event | Chromium process wall | load before |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {report['model']['node_count']} | {', '.join(f'{k} {v}' for k, v in sizes.items())} | {timing['nodes']} | "
          f"{len(html) / 1024:.0f} KiB | {med(server):.2f} s | {med(fcps):.2f} s | {med(browser):.2f} s | {med(walls):.1f} s | {load:.2f} |")


if __name__ == "__main__":
    main()
