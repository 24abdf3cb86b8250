"""The report's first screen and its graphs in real Chromium (headless, the flags of test_report_page_browser):
at 1280x800 the first screen holds every headline card and the "which file" sentence, nothing is cut off, and
each drawn graph accounts for every node of the level graph it draws. The pictures in docs/ come from here
(`make docs-pictures`):
docs/report.png (conv_relu's first screen) and docs/report_graph.png (yolo_style's graphs, 300+ nodes each).

Layout is measured on the page exactly as served, saved beside a measuring script (the served page runs no
script under its CSP): Chromium runs it on load and writes the rectangles into the DOM it dumps."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_report_page_browser import run_chromium

DOCS = Path(__file__).resolve().parents[2] / "docs"
# The pictures go into docs/ only when asked (`make docs-pictures`): `make test` leaves the tree as it was.
WRITE_DOCS = os.environ.get("QUANTCOMPARE_DOCS_PICTURES") == "1"


def picture(name: str, tmp_path: Path) -> Path:
    return DOCS / name if WRITE_DOCS else tmp_path / name


W, H = 1280, 800
MEASURE = """<script>
addEventListener('load', () => {
  const r = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const q = s => [...document.querySelectorAll(s)];
  const out = {
    answer: r(document.querySelector('.answer')), cards: q('.card').map(r), section: r(document.querySelector('#graphs')),
    scroll_width: document.documentElement.scrollWidth, view: [innerWidth, innerHeight],
    graphs: q('svg.graph').map(s => ({rect: r(s), nodes: [...s.querySelectorAll('g.node')].map(g => [g.id, r(g)])})),
  };
  const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def measured(url: str, tmp_path: Path) -> dict:
    page = httpx.get(url, timeout=120).text
    local = tmp_path / "page.html"
    local.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    done = run_chromium(tmp_path, f"--window-size={W},{H}", "--virtual-time-budget=10000", "--dump-dom",
                        local.as_uri())
    m = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout.decode("utf-8", "replace"), re.S)
    assert m, done.stderr.decode("utf-8", "replace")[-2000:]
    return json.loads(m[1].replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"'))


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[16:24]  # the IHDR chunk: width, height as big-endian 32-bit
    return int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")


def inside(inner, outer, slack: float = 1.0) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack
            and inner[2] <= outer[2] + slack and inner[3] <= outer[3] + slack)


def drawn_nodes(m: dict) -> dict[str, int]:
    """artifact -> nodes the drawing accounts for: box ids are qcn-<artifact>-<box>-<kind>-<nodes in the box>."""
    out: dict[str, int] = {}
    for g in m["graphs"]:
        for node_id, _ in g["nodes"]:
            art, _, kind, count = re.fullmatch(r"qcn-(.+)-(\d+)-(\w+)-(\d+)", node_id).groups()
            out[art] = out.get(art, 0) + int(count)
    return out


def check_first_screen(m: dict, cards: int) -> None:
    screen = [0, 0, W, H]
    # The page's width is the window's; --dump-dom's window keeps some height for itself, so the height checked is
    # the screenshot's 800 px (its PNG is W x H: checked where it is taken).
    assert m["view"][0] == W
    assert len(m["cards"]) == cards
    assert inside(m["answer"], screen), m["answer"]
    for rect in m["cards"]:
        assert inside(rect, screen), rect  # every card whole on the first screen
    assert m["scroll_width"] <= W  # no sideways scroll: nothing cut off on the right


def check_graphs(m: dict, report: dict, level: str) -> None:
    counts = drawn_nodes(m)
    arts = {n: a for n, a in report["artifacts"].items() if n != "fp32" and a["status"] == "ok"}
    assert set(counts) == set(arts)
    for name, art in arts.items():
        assert counts[name] == art["optimized"][level]["node_count"], name  # every node of the graph is drawn
    for g in m["graphs"]:
        assert g["rect"][2] <= W
        for node_id, rect in g["nodes"]:
            assert inside(rect, g["rect"]), node_id  # no box outside its drawing


@pytest.fixture(scope="module")
def yolo_job(real_server, fast):
    with real_server.client(timeout=400) as c:
        r = c.post("/v1/comparisons", params={"wait": 300},
                   json={"example": "yolo_style", "options": {**fast, "advice": {"enabled": False}}})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.browser
def test_first_screen_holds_the_answer_and_every_card(real_server, conv_relu_job, tmp_path):
    url = real_server.base_url + conv_relu_job["links"]["report_html"]
    m = measured(url, tmp_path)
    check_first_screen(m, cards=3)
    check_graphs(m, conv_relu_job["report"], conv_relu_job["report"]["headline"]["level"])
    shot = picture("report.png", tmp_path)
    run_chromium(tmp_path, f"--window-size={W},{H}", f"--screenshot={shot}", url)
    assert shot.is_file() and shot.stat().st_size > 20_000
    assert png_size(shot) == (W, H)


@pytest.mark.browser
def test_a_300_node_graph_is_drawn_whole(real_server, yolo_job, tmp_path):
    report = yolo_job["report"]
    assert max(a["optimized"]["all"]["node_count"] for n, a in report["artifacts"].items() if n != "fp32") >= 100
    url = real_server.base_url + yolo_job["links"]["report_html"]
    m = measured(url, tmp_path)
    check_first_screen(m, cards=3)
    check_graphs(m, report, "all")
    # The picture: the graphs section, cut from a window tall enough to hold the whole page's graphs.
    top = int(m["section"][1])
    bottom = int(max(g["rect"][3] for g in m["graphs"])) + 20
    full = tmp_path / "full.png"
    run_chromium(tmp_path, f"--window-size={W},{bottom}", f"--screenshot={full}", url)
    Image = pytest.importorskip("PIL.Image")
    with Image.open(full) as im:
        assert im.size == (W, bottom)
        im.crop((0, max(top, 0), W, bottom)).save(picture("report_graph.png", tmp_path), optimize=True)


def test_node_data_loads_as_model_explorer_graph_node_data(real_server, yolo_job):
    """<artifact>.<level>.node_data.json, next to the level graph: Model Explorer's GraphNodeData, read by the
    package's own dataclasses (dacite, strict: an unknown field fails), keyed by the level graph's output tensors."""
    onnx = pytest.importorskip("onnx")
    dacite = pytest.importorskip("dacite")
    builder = pytest.importorskip("model_explorer.node_data_builder")
    report, base = yolo_job["report"], yolo_job["links"]["artifacts"]
    level = report["artifacts"]["ort_qdq"]["optimized"]["all"]
    with real_server.client(timeout=120) as c:
        r = c.get(f"{base}/ort_qdq.all.node_data.json")
        graph = c.get(f"{base}/ort_qdq.all.onnx")  # the level graph it describes still downloads
        missing = c.get(f"{base}/ort_qdq.nope.node_data.json")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert "attachment" in r.headers["content-disposition"]
    assert missing.status_code == 404 and missing.json()["code"]
    data = r.json()
    parsed = dacite.from_dict(builder.GraphNodeData, data, config=dacite.Config(strict=True, check_types=False))
    for key, result in parsed.results.items():
        assert isinstance(result, dict) or isinstance(result, builder.NodeDataResult)
    # dacite keeps nested values as the dataclass when it can: build them the way Model Explorer does
    results = {k: builder.NodeDataResult(**v) for k, v in data["results"].items()}
    assert all(isinstance(v.value, (str, int, float)) and v.bgColor for v in results.values())
    assert json.loads(builder.GraphNodeData(results=results, name=data["name"]).to_json_string())["results"] == data["results"]

    assert graph.status_code == 200
    model = onnx.load_from_string(graph.content)
    outputs = {o for n in model.graph.node for o in n.output if o}
    assert set(data["results"]) == outputs  # every node of the graph ORT runs, by its output tensors
    by_name = {n["name"]: n for n in level["nodes"]}
    for u in level["unfused"]:
        for t in by_name[u["node"]]["outputs"]:
            assert data["results"][t]["value"].startswith(f"float: {u['blocker']}")
    assert any("SQNR" in v["value"] and "[" in v["value"] for v in data["results"].values())  # per-tensor, interval
