"""A level graph (``graph_view.GraphView``) laid out by Graphviz ``dot`` as inline SVG for the page.

Server-side, so the page stays script-free under its Content-Security-Policy. Every box links to its
row in the node table under the graph (``#qcd-<box id>``) and carries a tooltip (blocker, fix, SQNR).
Layouts are cached by their DOT text: a page asked again costs no second layout.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

from service.render.graphs.view import KINDS, GraphView

__all__ = ["dot_from_view", "svg_from_dot", "graph_svg", "DotUnavailable"]

DOT_TIMEOUT_S = 30


class DotUnavailable(RuntimeError):
    """Graphviz ``dot`` is missing or failed: the page shows the graph's node table without the drawing."""


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _tooltip(box) -> str:
    names = ", ".join(n.get("name", "?") for n in box.nodes[:3]) + (" …" if box.count > 3 else "")
    parts = [f"{box.nodes[0].get('op_type')} {names}" if box.count == 1 else f"{box.count} nodes: {names}",
             KINDS[box.kind][2]]
    if box.blocker:
        parts.append(f"blocker {box.blocker}: {box.detail or ''}".rstrip(": "))
    if box.fix:
        parts.append(f"fix: {box.fix}")
    if box.sqnr and box.sqnr.get("sqnr_db") is not None:
        ci = box.sqnr.get("ci") or []
        parts.append(f"SQNR {box.sqnr['sqnr_db']:.1f} dB" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if len(ci) == 2 and None not in ci else ""))
    return "\n".join(parts)[:600]


def dot_from_view(view: GraphView) -> str:
    lines = ['digraph G {',
             f'graph [rankdir=TB, nodesep=0.12, ranksep=0.22, bgcolor="transparent", fontname="DejaVu Sans", '
             f'id={_q("graph-" + view.artifact)}, nslimit=4, mclimit=0.5];',
             'node [shape=box, style="filled", fontname="DejaVu Sans", fontsize=9, height=0.22, width=0.3, '
             'margin="0.05,0.02", penwidth=0.8, color="#57606a"];',
             'edge [arrowsize=0.4, color="#8c959f", penwidth=0.7];']
    for i, b in enumerate(view.boxes):
        fill, text, _ = KINDS[b.kind]
        lines.append(f'b{i} [id={_q(f"qcn-{b.id}-{b.kind}-{b.count}")}, label={_q(b.label)}, fillcolor="{fill}", '
                     f'fontcolor="{text}", tooltip={_q(_tooltip(b))}, href={_q(f"#qcd-{b.id}")}'
                     + (', peripheries=2' if b.count > 1 else '') + '];')
    lines += [f"b{a} -> b{c};" for a, c in view.edges]
    lines.append("}")
    return "\n".join(lines)


@functools.lru_cache(maxsize=32)
def svg_from_dot(dot: str) -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise DotUnavailable("Graphviz is not installed (make system-deps installs it)")
    try:
        done = subprocess.run([exe, "-Tsvg"], input=dot.encode(), capture_output=True, timeout=DOT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as e:
        raise DotUnavailable(f"Graphviz took more than {DOT_TIMEOUT_S} s") from e
    if done.returncode != 0:
        raise DotUnavailable(done.stderr.decode("utf-8", "replace")[:300])
    svg = done.stdout.decode("utf-8", "replace")
    svg = svg[svg.index("<svg"):]  # no XML prolog or DOCTYPE inside HTML
    # Graphviz's comments and ids-as-titles only weigh the page; the tooltip becomes the link's <title>,
    # which is what a browser shows on hover.
    svg = re.sub(r"<!--.*?-->\n?", "", svg)
    svg = re.sub(r"<title>[^<]*</title>\n?", "", svg)
    svg = re.sub(r'<a xlink:href="([^"]*)" xlink:title="([^"]*)">', r'<a href="\1"><title>\2</title>', svg)
    # What every box and edge repeats goes to the page's stylesheet (base.html: svg.graph): a third of the bytes.
    svg = (svg.replace(' font-family="DejaVu Sans" font-size="9.00"', "")
           .replace(' stroke="#57606a" stroke-width="0.8"', "").replace(' stroke="#8c959f" stroke-width="0.7"', ""))
    svg = re.sub(r'<g id="a_[^"]*">(<a [^>]*>)', r"\1", svg)
    svg = svg.replace("</a>\n</g>\n</g>", "</a>\n</g>")
    # SVG 2's plain href: the page names no namespace URL it does not need (the page test holds it to that).
    svg = svg.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "").replace("xlink:href=", "href=")
    # Graphviz writes width/height in pt: keep the drawing at its size, scaled down to the column when wider.
    return re.sub(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"',
                  lambda m: f'<svg class="graph" width="{float(m[1]):.0f}pt" height="{float(m[2]):.0f}pt" '
                            f'style="max-width: 100%; height: auto"', svg, count=1)


def graph_svg(view: GraphView) -> str:
    return svg_from_dot(dot_from_view(view))
