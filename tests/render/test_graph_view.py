"""The level graph as boxes to draw (render/graphs/view.py) and as Graphviz SVG (render/graphs/svg.py): every node
is in exactly one box, kinds come from the node and its unfused row, long chains fold only on big graphs."""

from __future__ import annotations

import re
import shutil

import pytest

from service.render.graphs.view import COLLAPSE_OVER, graph_view


def node(name, op, inputs, outputs, domain=""):
    return {"name": name, "op_type": op, "domain": domain, "inputs": inputs, "outputs": outputs}


def chain_level(n_blocks: int) -> dict:
    """x -> (DQ -> Mul(float, blocked) -> Q) x n, with a weight DQ per Mul read from an initializer, then QLinearConv."""
    nodes, prev = [], "x"
    unfused = []
    for i in range(n_blocks):
        nodes += [node(f"dq{i}", "DequantizeLinear", [prev, "s", "z"], [f"d{i}"]),
                  node(f"wdq{i}", "DequantizeLinear", [f"w{i}", "s", "z"], [f"wd{i}"]),
                  node(f"mul{i}", "Mul", [f"d{i}", f"wd{i}"], [f"m{i}"]),
                  node(f"q{i}", "QuantizeLinear", [f"m{i}", "s", "z"], [f"q{i}"])]
        unfused.append({"node": f"mul{i}", "op_type": "Mul", "blocker": "no_qdq_rule", "detail": "", "fix": "nothing"})
        prev = f"q{i}"
    nodes.append(node("conv", "QLinearConv", [prev, "s", "z", "W", "s", "z", "s", "z"], ["y"]))
    return {"nodes": nodes, "unfused": unfused, "node_count": len(nodes)}


def test_a_small_graph_keeps_a_box_per_node_coloured_by_kind():
    lv = chain_level(3)
    v = graph_view(lv, artifact="ort_qdq", level_name="all")
    assert not v.collapsed and len(v.boxes) == lv["node_count"] == 13
    assert v.counts() == {"qdq": 9, "float": 3, "int8": 1}
    mul = next(b for b in v.boxes if b.nodes[0]["name"] == "mul0")
    assert (mul.kind, mul.blocker, mul.label) == ("float", "no_qdq_rule", "Mul\nno_qdq_rule")
    assert len(v.edges) == 12 - 0  # dq->mul, wdq->mul, mul->q, q->dq(next) ... q2->conv


def test_a_big_graph_folds_its_chains_and_still_accounts_for_every_node():
    lv = chain_level(COLLAPSE_OVER // 4 + 10)
    v = graph_view(lv, artifact="ort_qdq", level_name="all", layers=None)
    assert v.collapsed and len(v.boxes) < lv["node_count"] / 10
    assert sum(b.count for b in v.boxes) == lv["node_count"]
    assert sorted(n["name"] for b in v.boxes for n in b.nodes) == sorted(n["name"] for n in lv["nodes"])
    folded = max(v.boxes, key=lambda b: b.count)
    assert folded.kind == "float" and folded.blocker == "no_qdq_rule" and "Q/DQ" in folded.label


def test_a_box_carries_the_per_tensor_sqnr_of_its_output_with_its_interval():
    layers = {"rows": [{"tensor": "m1", "artifacts": {"ort_qdq": {"sqnr_db": 31.5, "sqnr_db_ci": [30.9, 32.0],
                                                                   "file_tensor": "m1"}}}]}
    v = graph_view(chain_level(2), artifact="ort_qdq", level_name="all", layers=layers)
    mul1 = next(b for b in v.boxes if b.nodes[0]["name"] == "mul1")
    assert mul1.sqnr == {"sqnr_db": 31.5, "ci": [30.9, 32.0], "tensor": "m1"}


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is installed by make system-deps")
def test_the_svg_has_one_linked_box_per_box_and_no_script():
    from service.render.graphs.svg import graph_svg

    v = graph_view(chain_level(3), artifact="ort_qdq", level_name="all")
    svg = graph_svg(v)
    ids = re.findall(r'<g id="(qcn[^"]+)" class="node"', svg)
    assert len(ids) == len(v.boxes)
    assert sum(int(i.rsplit("&#45;", 1)[-1]) for i in ids) == 13
    assert svg.count('href="#qcd-ort_qdq-') == len(v.boxes)
    assert "<script" not in svg and "xlink" not in svg and "<!--" not in svg
