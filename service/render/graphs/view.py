"""The graph ORT runs at one level, as boxes and edges to draw: each node coloured int8 kernel, float
(with its blocker code) or Q/DQ, long chains folded into one box on big graphs.

Pure: reads a level of the report JSON (``optimized.<level>``: ``nodes``, ``unfused``) and the per-tensor
table (``layers``) as plain dicts. ``graph_svg.svg_from_dot`` lays the DOT text out with Graphviz.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from service.pipeline.vocabulary import DATA_MOVEMENT_OPS, INT8_KERNELS, QDQ_OPS, SHAPE_READING_OPS, is_onnx_domain

__all__ = ["Box", "GraphView", "COLLAPSE_OVER", "MIN_CHAIN", "graph_view", "tensor_sqnr_index", "node_kind"]

# Chains fold only on graphs larger than this: a 100-node model keeps a box per node, a 1,000-node one
# stays readable (and Graphviz stays well under a second).
COLLAPSE_OVER = 200
MIN_CHAIN = 3  # a chain of this many same-kind nodes, one after the other, becomes one box
MAX_FOLD = 60  # repeated blocks fold into boxes of at most this many nodes: the drawing keeps the model's length

KINDS = {  # kind -> (fill, text colour, legend)
    "int8": ("#2da44e", "#ffffff", "int8 kernel"),
    "float": ("#e5534b", "#ffffff", "float, with the ORT condition that kept it (blocker)"),
    "qdq": ("#d0d7de", "#1f2328", "QuantizeLinear / DequantizeLinear"),
    "other": ("#ffffff", "#1f2328", "runs as written (no int8 form needed: shape, copy, ...)"),
}


_SHORT = {"QuantizeLinear": "Q", "DequantizeLinear": "DQ"}
_MOVES = DATA_MOVEMENT_OPS | SHAPE_READING_OPS  # listed after the ops that compute in a folded box's label


def _key(n: dict) -> str:
    dom = n.get("domain") or ""
    return n.get("op_type", "?") if is_onnx_domain(dom) else f"{dom}.{n.get('op_type', '?')}"


def node_kind(n: dict, blocked: dict) -> str:
    if n.get("op_type") in QDQ_OPS:
        return "qdq"
    if _key(n) in INT8_KERNELS:
        return "int8"
    return "float" if n.get("name") in blocked else "other"


def tensor_sqnr_index(layers: dict | None, artifact: str) -> dict[str, dict]:
    """Tensor name (in the file, and the fp32 name) -> {sqnr_db, ci, tensor} of the per-tensor table."""
    out: dict[str, dict] = {}
    for r in (layers or {}).get("rows") or []:
        cell = (r.get("artifacts") or {}).get(artifact)
        if not cell:
            continue
        entry = {"sqnr_db": cell.get("sqnr_db"), "ci": cell.get("sqnr_db_ci"), "tensor": r.get("tensor")}
        for name in (cell.get("file_tensor"), r.get("tensor")):
            if name:
                out.setdefault(name, entry)
    return out


@dataclass
class Box:
    id: str
    kind: str
    nodes: list[dict]
    blocker: str | None = None
    detail: str | None = None
    fix: str | None = None
    sqnr: dict | None = None
    kinds: Counter = field(default_factory=Counter)  # node kind -> count, for a folded box

    @property
    def count(self) -> int:
        return len(self.nodes)

    @property
    def label(self) -> str:
        """The op (or the ops of a folded chain, Q/DQ counted apart), then the blocker code of a float box."""
        ops = Counter(n.get("op_type", "?") for n in self.nodes)
        qdq = sum(v for k, v in ops.items() if k in QDQ_OPS)
        main = [f"{k} ×{v}" if v > 1 else k for k, v in sorted(ops.items(), key=lambda kv: (kv[0] in _MOVES, -kv[1]))
                if k not in QDQ_OPS]
        if not main:
            text = " ".join(f"{_SHORT[k]} ×{v}" if v > 1 else _SHORT[k] for k, v in sorted(ops.items()))
        else:
            text = ", ".join(main[:2]) + (", …" if len(main) > 2 else "") + (f" +{qdq} Q/DQ" if qdq else "")
        mixed = {k: v for k, v in self.kinds.items() if k in ("int8", "float")}
        if len(mixed) > 1:
            text += "\n" + ", ".join(f"{k} ×{v}" for k, v in sorted(mixed.items(), key=lambda kv: kv[0] != "int8"))
        return text + (f"\n{self.blocker}" if self.blocker else "")


@dataclass
class GraphView:
    artifact: str
    level: str
    boxes: list[Box] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    node_count: int = 0
    collapsed: bool = False

    def counts(self) -> dict[str, int]:
        c: Counter = Counter()
        for b in self.boxes:
            c.update(b.kinds or {b.kind: b.count})
        return dict(c)


def _links(nodes: list[dict]) -> tuple[list[set[int]], list[set[int]]]:
    producer = {o: i for i, n in enumerate(nodes) for o in n.get("outputs") or [] if o}
    preds: list[set[int]] = [set() for _ in nodes]
    succs: list[set[int]] = [set() for _ in nodes]
    for i, n in enumerate(nodes):
        for t in n.get("inputs") or []:
            p = producer.get(t)
            if p is not None and p != i:
                preds[i].add(p)
                succs[p].add(i)
    return preds, succs


def _chains(keys: list[tuple], preds: list[set[int]], succs: list[set[int]], skip: set[int]) -> list[list[int]]:
    """Maximal runs i -> j -> ... where each link is the only way out of i and the only way into j (the nodes in
    ``skip`` left out), of one key; a Q/DQ node joins any run (a chain of float Muls keeps its Q/DQ pairs)."""
    def key(i: int) -> tuple | None:
        return None if keys[i][0] == "qdq" else keys[i]

    def joined(i: int, run_key: tuple | None) -> int | None:
        out = succs[i] - skip
        if len(out) != 1:
            return None
        j = next(iter(out))
        ok = len(preds[j] - skip) == 1 and (key(j) is None or run_key is None or key(j) == run_key)
        return j if ok else None

    def walk(i: int) -> list[int]:
        run, run_key = [i], key(i)
        while (j := joined(run[-1], run_key)) is not None and j not in run:
            run.append(j)
            run_key = run_key or key(j)
        return run

    placed: set[int] = set()
    runs = []
    for i in range(len(keys)):  # nodes are in topological order (ORT saves them so)
        if i in skip or i in placed:
            continue
        run = [j for j in walk(i) if j not in placed]
        placed |= set(run)
        runs.append(run)
    return runs


def _block_runs(keys: list[tuple], ops: list[str], succs: list[set[int]]) -> list[list[int]]:
    """Runs of consecutive blocks that repeat one another: a block ends where a single tensor is live between the
    nodes before and after it (nodes in saved, topological order), as after each residual block; blocks whose nodes
    (Q/DQ and shape ops aside) have the same ops, kinds and blockers repeat. 70 residual blocks in a row become
    a few boxes of at most MAX_FOLD nodes each."""
    last_use = [max(succ, default=i) for i, succ in enumerate(succs)]
    ending = Counter(u for i, u in enumerate(last_use) if u > i)
    blocks, start, live = [], 0, 0
    for p in range(len(keys)):
        live += (last_use[p] > p) - ending[p]  # tensors made at or before p and read after it
        if live <= 1:  # only the block's output (or nothing) goes on past p
            blocks.append(list(range(start, p + 1)))
            start = p + 1
    if start < len(keys):
        blocks.append(list(range(start, len(keys))))
    runs: list[tuple[tuple, list[list[int]]]] = []
    for block in blocks:
        sig = tuple(sorted(Counter((keys[i], ops[i]) for i in block if keys[i][0] not in ("qdq", "other")).items()))
        fits = bool(runs) and sum(map(len, runs[-1][1])) + len(block) <= MAX_FOLD
        if fits and (not sig or runs[-1][0] == sig):  # a block of Q/DQ only (between two others) joins the run
            runs[-1][1].append(block)
        else:
            runs.append((sig, [block]))
    out = []
    for sig, bs in runs:
        one_kind = len({k for (k, _), _ in sig}) == 1
        repeats = sum(1 for b in bs if any(keys[i][0] not in ("qdq", "other") for i in b))
        if sig and (repeats >= 2 or (one_kind and len(bs[0]) >= 2 * MIN_CHAIN)):
            out.append([i for b in bs for i in b])
    return out


def _sqnr_of(tensor: str, sqnr: dict[str, dict]) -> dict | None:
    # ORT names a fused int8 kernel's output after the QuantizeLinear it absorbed ("<tensor>_quantized").
    return sqnr.get(tensor) or sqnr.get(tensor.removesuffix("_quantized"))


def graph_view(level: dict, *, artifact: str, level_name: str, layers: dict | None = None,
               collapse_over: int = COLLAPSE_OVER) -> GraphView:
    nodes = list(level.get("nodes") or [])
    blocked = {u.get("node"): u for u in level.get("unfused") or []}
    sqnr = tensor_sqnr_index(layers, artifact)
    kinds = [node_kind(n, blocked) for n in nodes]
    keys = [(k, (blocked.get(n.get("name")) or {}).get("blocker")) for k, n in zip(kinds, nodes)]
    preds, succs = _links(nodes)
    collapsed = len(nodes) > collapse_over
    groups: list[list[int]] = [[i] for i in range(len(nodes))]
    attach: dict[int, int] = {}
    if collapsed:
        # A node that reads only initializers (a weight's DequantizeLinear, a Constant) goes in its one reader's box.
        attach = {i: next(iter(succs[i])) for i in range(len(nodes)) if not preds[i] and len(succs[i]) == 1}
        # Whole blocks of one kind first, then chains among the nodes left.
        groups = [r for r in _block_runs(keys, [n.get("op_type", "?") for n in nodes], succs) if len(r) >= 2 * MIN_CHAIN]
        folded = {i for g in groups for i in g}
        for i in list(attach):
            if i in folded:
                del attach[i]
        for run in _chains(keys, preds, succs, set(attach) | folded):
            groups += [run] if len(run) >= MIN_CHAIN else [[i] for i in run]
        home = {i: g for g in groups for i in g}
        for i, j in attach.items():
            while j in attach:
                j = attach[j]
            home[j].append(i)
        groups = [sorted(g) for g in groups]
    groups.sort(key=lambda g: g[0])
    box_of = {i: b for b, g in enumerate(groups) for i in g}
    view = GraphView(artifact=artifact, level=level_name, node_count=len(nodes), collapsed=collapsed)
    for b, g in enumerate(groups):
        members = [nodes[i] for i in g]
        row = next((blocked[n.get("name")] for n in members if n.get("name") in blocked), {})
        hit = next((_sqnr_of(t, sqnr) for n in members for t in n.get("outputs") or [] if _sqnr_of(t, sqnr)), None)
        # The box's colour: its chain's kind (Q/DQ join any chain; a weight's DQ rides on its reader's box).
        present = {kinds[i] for i in g if i not in attach} or {kinds[i] for i in g}
        kind = next(k for k in ("float", "int8", "other", "qdq") if k in present or k == "qdq")
        view.boxes.append(Box(id=f"{artifact}-{b}", kind=kind, kinds=Counter(kinds[i] for i in g), nodes=members,
                              blocker=row.get("blocker"), detail=row.get("detail"), fix=row.get("fix"), sqnr=hit))
    view.edges = sorted({(box_of[p], box_of[i]) for i in range(len(nodes)) for p in preds[i] if box_of[p] != box_of[i]})
    return view
