"""The difference between two graphs of the same file, grouped into named rewrites.

A node is the same on both sides when op_type, domain, inputs and outputs are equal (ORT adds
default attributes such as ``saturate`` when it touches a node; that is not a rewrite). The
rest is grouped by tensor connectivity:

- removed nodes join when one reads a float tensor the other wrote and that tensor is gone
  after the rewrite, but never across a QuantizeLinear -> DequantizeLinear edge: that edge is
  where one QDQ node unit ends and the next begins, so two fusions side by side stay two rewrites;
- a node on the new side joins the removed nodes it replaces: same name (ORT gives the fused
  node the target node's name, NHWC adds ``_token_N``), or it now writes a tensor they wrote;
- a new node with no such anchor (an inserted Transpose, a duplicated DequantizeLinear) joins
  the new node it feeds or reads through a tensor that did not exist before.

Each group is then named from a table of patterns with the ORT GraphTransformer or RewriteRule that makes it,
by the name it registers under (``GraphTransformer::Name()`` / ``RewriteRule::Name()``, the names
``optimization.disable_specified_optimizers`` takes; graph_transformer_utils.cc creates them), so that
switching the named one off (runtime/levels.py ``_attribute``) can confirm it.
"""

from __future__ import annotations

import re
from collections import Counter

import onnx

from service.pipeline.vocabulary import (
    ACTIVATIONS_ABSORBED_BY_Q,
    BIASED_COMPUTE_OPS,
    INT8_KERNELS,
    MS,
    NCHWC,
    QDQ_DROP_OPS,
    QDQ_OPS,
    GraphIndex,
    op_key,
)
from service.schemas.levels import LevelDiff, Rewrite

_TOKEN = re.compile(r"(_token_\d+)+$")
# Level2 RewriteRules: the classes ReluQuantFusion / ClipQuantFusion (qdq_transformer/relu_quantizelinear.h,
# clip_quantizelinear.h) register under these names, the ones optimization.disable_specified_optimizers and the
# attribution in runtime/levels.py switch off (tests/pipeline/inspect/test_graph_diff.py pins each).
RELU_QUANT, CLIP_QUANT = "ReluQuantRewrite", "ClipQuantRewrite"

def _key(n: onnx.NodeProto) -> tuple:
    return (n.domain or "", n.op_type, tuple(n.input), tuple(n.output))


def _base_name(name: str) -> str:
    return _TOKEN.sub("", name)


class _UF:
    def __init__(self):
        self.p: dict = {}

    def find(self, x):
        self.p.setdefault(x, x)
        while self.p[x] != x:
            self.p[x] = self.p[self.p[x]]
            x = self.p[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.p[rb] = ra


def _count_text(keys: list[str]) -> str:
    c = Counter(keys)
    order = list(dict.fromkeys(keys))
    return " + ".join(k if c[k] == 1 else f"{k} x{c[k]}" for k in order)


def _tensors(nodes) -> set[str]:
    return {t for n in nodes for t in (*n.input, *n.output) if t}


def diff_graphs(old: GraphIndex, new: GraphIndex, *, previous: str) -> LevelDiff:
    old_keys = Counter(_key(n) for n in old.nodes)
    new_keys = Counter(_key(n) for n in new.nodes)
    removed, added = _taken(old.nodes, old_keys - new_keys), _taken(new.nodes, new_keys - old_keys)
    if not removed and not added:
        return LevelDiff(previous=previous, nodes_removed=0, nodes_added=0)
    groups, modified = _rewrite_groups(old, new, removed, added)
    # Once per diff, not per rewrite group: thousands of groups on a big graph made it quadratic.
    old_dq_inputs = {tuple(n.input) for n in old.nodes if n.op_type == "DequantizeLinear"}
    modified_removed = {i for i, _ in modified}
    rewrites = [_classify(_Changes(old, new, [removed[i] for i in r_idx], [added[j] for j in a_idx],
                                   {removed[i].name for i in r_idx if i in modified_removed}, old_dq_inputs))
                for r_idx, a_idx in groups]
    rewrites = _merge_s8_to_u8(rewrites, {n.name: op_key(n) for n in old.nodes})
    if previous in ("file", "disable_all", "basic"):
        # NhwcTransformer and NchwcTransformer are Level3 (layout) transformers: a channels-last node that
        # appears at extended or below is made by something else, so neither is named there.
        rewrites = [r.model_copy(update={"transformer": None}) if r.transformer in ("NhwcTransformer",
                                                                                     "NchwcTransformer") else r
                    for r in rewrites]
    return LevelDiff(previous=previous, nodes_removed=len(removed), nodes_added=len(added), rewrites=rewrites)


def _taken(nodes, budget: Counter) -> list:
    """The nodes ``budget`` counts (by ``_key``), the first ones of each key, in graph order."""
    budget = Counter(budget)
    taken = []
    for n in nodes:
        if budget[_key(n)] > 0:
            taken.append(n)
            budget[_key(n)] -= 1
    return taken


def _rewrite_groups(old: GraphIndex, new: GraphIndex, removed: list, added: list):
    """([(removed indices, added indices)] of each rewrite, {(removed, added) index pairs of a node
    modified in place}), by the connectivity rules of the module's docstring."""
    old_t, new_t = _tensors(old.nodes), _tensors(new.nodes)
    inits = set(old.initializers) | set(new.initializers)
    vanished = (old_t - new_t) - inits
    appeared = (new_t - old_t) - inits

    uf = _UF()
    members = [("r", i) for i in range(len(removed))] + [("a", j) for j in range(len(added))]
    for x in members:
        uf.find(x)
    prod_r = {o: i for i, n in enumerate(removed) for o in n.output if o}
    _join_removed(uf, removed, prod_r, vanished)
    anchored, modified = _anchor_added(uf, removed, added, prod_r)
    _join_unanchored(uf, added, appeared, anchored)

    groups: dict = {}
    for x in members:
        groups.setdefault(uf.find(x), []).append(x)
    return [(sorted(i for s, i in m if s == "r"), sorted(j for s, j in m if s == "a")) for m in groups.values()], modified


def _join_removed(uf: _UF, removed: list, prod_r: dict[str, int], vanished: set[str]) -> None:
    """removed <-> removed through vanished tensors, cut at Q -> DQ edges."""
    for j, n in enumerate(removed):
        for t in n.input:
            i = prod_r.get(t)
            if i is None or t not in vanished:
                continue
            if removed[i].op_type == "QuantizeLinear" and n.op_type == "DequantizeLinear":
                continue
            uf.union(("r", i), ("r", j))


def _anchor_added(uf: _UF, removed: list, added: list, prod_r: dict[str, int]):
    """Each new node joins the removed nodes it replaces (same base name, or a tensor they wrote);
    returns (the anchored new nodes, the (removed, added) pairs of one node modified in place)."""
    anchored: set[int] = set()
    modified: set[tuple[int, int]] = set()
    by_name: dict[str, list[int]] = {}
    for i, n in enumerate(removed):
        if n.name:
            by_name.setdefault(_base_name(n.name), []).append(i)
    for j, n in enumerate(added):
        for i in by_name.get(_base_name(n.name), []) if n.name else []:
            uf.union(("r", i), ("a", j))
            anchored.add(j)
            if removed[i].op_type == n.op_type and removed[i].domain == n.domain:
                modified.add((i, j))
    for j, n in enumerate(added):
        if j in anchored:
            continue
        for o in n.output:
            if o in prod_r:
                uf.union(("r", prod_r[o]), ("a", j))
                anchored.add(j)
    return anchored, modified


def _join_unanchored(uf: _UF, added: list, appeared: set[str], anchored: set[int]) -> None:
    """Unanchored new nodes join anchored new neighbours through appeared tensors; the rest, among themselves."""
    touching: dict[str, list[int]] = {}
    for j, n in enumerate(added):
        for t in (*n.input, *n.output):
            if t in appeared:
                touching.setdefault(t, []).append(j)
    changed = True
    while changed:
        changed = False
        for j in range(len(added)):
            if j in anchored:
                continue
            n = added[j]
            for t in (*n.input, *n.output):
                for k in touching.get(t, []):
                    if k in anchored:
                        uf.union(("a", k), ("a", j))
                        anchored.add(j)
                        changed = True
                        break
                if j in anchored:
                    break
    for nodes in touching.values():
        free = [j for j in nodes if j not in anchored]
        for j in free[1:]:
            uf.union(("a", free[0]), ("a", j))


def _merge_s8_to_u8(rewrites: list[Rewrite], op_of: dict[str, str]) -> list[Rewrite]:
    """One rewrite for all Q/DQ that QDQS8ToU8Transformer switched to uint8 at this level."""
    same = [r for r in rewrites if r.kind == "s8_to_u8"]
    if len(same) < 2:
        return rewrites
    rest = [r for r in rewrites if r.kind != "s8_to_u8"]
    mods = [m for r in same for m in r.modified]
    merged = same[0].model_copy(update={
        "removed": [m for r in same for m in r.removed], "added": [m for r in same for m in r.added],
        "modified": mods,
        "summary": f"activations int8 -> uint8 ({_count_text([op_of.get(m, '?') for m in mods])} rewritten)",
    })
    return rest + [merged]


def _zp_dtype(g: GraphIndex, n: onnx.NodeProto) -> str | None:
    if n.op_type in QDQ_OPS and len(n.input) > 2 and n.input[2]:
        return g.dtypes.get(n.input[2])
    return None


class _Changes:
    """One group of removed/added nodes, as the rewrite families read it. ``modified_names``: the nodes
    modified in place (on both sides); ``old_dq_inputs``: the input lists of the old graph's
    DequantizeLinear nodes."""

    def __init__(self, old: GraphIndex, new: GraphIndex, rem: list, add: list, modified_names: set[str],
                 old_dq_inputs: set[tuple[str, ...]]):
        self.old, self.new, self.rem, self.add = old, new, rem, add
        self.modified_names, self.old_dq_inputs = modified_names, old_dq_inputs
        self.rem_only = [n for n in rem if n.name not in modified_names]
        self.mod_new = [n for n in add if n.name in modified_names]
        self.add_only = [n for n in add if n.name not in modified_names]
        self.rk = [op_key(n) for n in self.rem_only]
        self.ak = [op_key(n) for n in self.add_only]
        rk, ak = self.rk, self.ak
        self.generic = f"{_count_text(rk)} -> {_count_text(ak)}" if rk and ak else (
            f"{_count_text(rk)} removed" if rk else f"{_count_text(ak)} added" if ak else "")

    def rw(self, summary: str, kind: str, transformer: str | None = None) -> Rewrite:
        return Rewrite(summary=summary, kind=kind, transformer=transformer, removed=[n.name for n in self.rem],
                       added=[n.name for n in self.add], modified=sorted(self.modified_names))


def _classify(c: _Changes) -> Rewrite:
    """One group of removed/added nodes -> the rewrite it is: the first family that recognizes it."""
    for family in _FAMILIES:
        rewrite = family(c)
        if rewrite is not None:
            return rewrite
    return c.rw(c.generic, "other")


def _layout(c: _Changes) -> Rewrite | None:
    """Level3's layout transformers, and the Transposes the transpose optimizer inserts."""
    if any(n.domain == NCHWC for n in c.add):
        return c.rw(f"{c.generic} (NCHWc)", "nchwc", "NchwcTransformer")
    nhwc = [n for n in c.add if n.domain == MS and (n.op_type.startswith("Nhwc") or any(
        a.name == "channels_last" and a.i == 1 for a in n.attribute))]
    if nhwc:
        return c.rw(f"{c.generic} (NHWC)", "nhwc", "NhwcTransformer")
    if not c.rem_only and c.ak and set(c.ak) == {"Transpose"} and not c.mod_new:
        return c.rw(f"Transpose inserted x{len(c.ak)}" if len(c.ak) > 1 else "Transpose inserted", "transpose",
                    "TransposeOptimizer")
    return None


def _qdq_fusion(c: _Changes) -> Rewrite | None:
    """A QDQ node unit made an int8 kernel (with the Relu/Clip it absorbs, and int8 run as uint8 on x86)."""
    kernels = [n for n in c.add_only if op_key(n) in INT8_KERNELS]
    rem_q = [n for n in c.rem if n.op_type in QDQ_OPS]
    if not (kernels and rem_q):
        return None
    t = "QDQSelectorActionTransformer"
    if any(n.op_type == "Relu" for n in c.rem_only):
        t = f"{RELU_QUANT}, " + t
    elif any(n.op_type == "Clip" for n in c.rem_only):
        t = f"{CLIP_QUANT}, " + t
    was = {_zp_dtype(c.old, n) for n in rem_q} - {None}
    now = {c.new.dtypes.get(n.input[2]) if len(n.input) > 2 else None for n in kernels} - {None}
    suffix = ""
    if was == {"int8"} and now == {"uint8"}:
        suffix = " (int8 activations run as uint8)"
        t = "QDQS8ToU8Transformer, " + t
    return c.rw(c.generic + suffix, "qdq_fusion", t)


def _qdq_drop(c: _Changes) -> Rewrite | None:
    """Q/DQ dropped around a data-movement op that now runs on int8."""
    rem_q = [n for n in c.rem if n.op_type in QDQ_OPS]
    if not (rem_q and not c.add_only and c.mod_new and all(n.op_type in QDQ_DROP_OPS for n in c.mod_new)
            and all(k in QDQ_OPS for k in c.rk)):
        return None
    ops = _count_text([op_key(n) for n in c.mod_new])
    # the dtype it now reads: uint8 on x86 when QDQS8ToU8Transformer converted the pair, else as written
    on = "/".join(sorted({c.new.dtypes.get(n.input[0]) or "8-bit" for n in c.mod_new})) or "8-bit"
    return c.rw(f"{_count_text(c.rk)} removed around {ops} (runs on {on})", "qdq_drop",
                "QDQSelectorActionTransformer")


def _session_quantization(c: _Changes) -> Rewrite | None:
    """Float weights and biases ORT quantizes itself at session time."""
    if c.rem_only:
        return None
    new = c.new
    # bias quantized to int32 at session time
    dq_i32 = [n for n in c.add_only if n.op_type == "DequantizeLinear" and new.dtypes.get(n.input[0]) == "int32"
              and n.input[0] in new.initializers]
    # WeightBiasQuantization (weight_bias_quantization.cc, registered in Level1 by graph_transformer_utils.cc unless
    # session.disable_quant_qdq=1): a Conv/ConvTranspose/Gemm whose input 0 comes from a DequantizeLinear with a
    # scalar (per-tensor) scale and whose single output reaches a QuantizeLinear through nothing but Relu/Clip,
    # no branch (IsNoBranchPathToQuantizeLinear). A float32 initializer weight is then quantized to int8 per tensor
    # with GetQuantizationParameter's min/max (asymmetric: its zero point comes from the range), and a 1-D
    # initializer bias to int32 at input scale x weight scale; a bias that is not an initializer stops both. A
    # ConvTranspose then still runs in float (no QDQ rule on the CPU EP), on the rounded weight.
    w_i8 = [r for n in c.add_only if n.op_type == "DequantizeLinear" and new.dtypes.get(n.input[0]) == "int8"
            and n.input[0] in new.initializers
            for r in new.consumers.get(n.output[0], []) if len(r.input) > 1 and r.input[1] == n.output[0]
            and r.op_type in BIASED_COMPUTE_OPS]
    if w_i8:
        return c.rw(f"float weight of {_count_text([op_key(r) for r in w_i8])} quantized to int8 per tensor "
                    "(asymmetric)" + (", bias to int32" if dq_i32 else "")
                    + " (WeightBiasQuantization: a per-tensor DequantizeLinear before it, a QuantizeLinear after it)",
                    "bias_int32" if dq_i32 else "weight_int8", "WeightBiasQuantization")
    if dq_i32:
        return c.rw("bias quantized to int32 (DequantizeLinear of int32 initializer added)"
                    + (f" x{len(dq_i32)}" if len(dq_i32) > 1 else ""), "bias_int32", "WeightBiasQuantization")
    return None


def _qdq_placement(c: _Changes) -> Rewrite | None:
    """Q/DQ that ORT adds or retypes without fusing anything: duplicated for a shared input, propagated,
    int8 -> uint8 in place."""
    if c.rem_only:
        return None
    # EnsureUniqueDQForNodeUnit: a DQ with the same inputs as one that was already there
    dups = [n for n in c.add_only if n.op_type == "DequantizeLinear" and tuple(n.input) in c.old_dq_inputs]
    if dups:
        return c.rw("DequantizeLinear duplicated for a shared input" + (f" x{len(dups)}" if len(dups) > 1 else ""),
                    "dq_duplicated", "EnsureUniqueDQForNodeUnit")
    if c.ak and set(c.ak) <= QDQ_OPS:
        return c.rw(f"{_count_text(c.ak)} inserted (Q/DQ propagated)", "qdq_propagation", "QDQPropagationTransformer")
    # int8 -> uint8 on Q/DQ rewritten in place
    pairs = [(o, n) for o in c.rem if o.name in c.modified_names for n in c.mod_new if n.name == o.name]
    if pairs and not c.add_only and any(
            _zp_dtype(c.old, o) == "int8" and _zp_dtype(c.new, n) == "uint8" for o, n in pairs):
        ops = _count_text([op_key(o) for o, _ in pairs])
        return c.rw(f"activations int8 -> uint8 ({ops} rewritten)", "s8_to_u8", "QDQS8ToU8Transformer")
    return None


def _float_fusion(c: _Changes) -> Rewrite | None:
    """Float ops fused into one: an activation into its QuantizeLinear, BatchNormalization or Add/Mul into
    a Conv, Conv + activation, MatMul + Add, MatMul + scale/transpose."""
    rk, ak = c.rk, c.ak
    if rk and set(rk) <= ACTIVATIONS_ABSORBED_BY_Q and not c.add_only:
        t = RELU_QUANT if "Relu" in rk else CLIP_QUANT
        follow = [n.op_type for n in c.mod_new]
        into = " into QuantizeLinear" if "QuantizeLinear" in follow else ""
        return c.rw(f"{_count_text(rk)} absorbed{into}", "activation_absorbed", t)
    if "BatchNormalization" in rk and ("Conv" in rk or any(n.op_type == "Conv" for n in c.mod_new)):
        return c.rw("Conv + BatchNormalization -> Conv (BatchNormalization folded)", "conv_bn", "ConvBNFusion")
    if f"{MS}.FusedConv" in ak:
        return c.rw(c.generic, "conv_activation", "ConvActivationFusion")
    if "Gemm" in ak and "MatMul" in rk:
        return c.rw(c.generic, "matmul_add", "MatMulAddFusion")
    if f"{MS}.FusedMatMul" in ak:
        return c.rw(c.generic, "fused_matmul", "MatMulScaleFusion, MatmulTransposeFusion")
    # tried before _elimination's checks: no group is both (a Conv modified in place, only Add/Mul removed)
    if rk and "Conv" in [n.op_type for n in c.mod_new] and set(rk) <= {"Add", "Mul"}:
        return c.rw(f"Conv + {_count_text(rk)} -> Conv", "conv_fusion", "ConvAddFusion, ConvMulFusion")
    return None


def _elimination(c: _Changes) -> Rewrite | None:
    """Nodes removed with nothing in their place: Identity/Dropout eliminated, or folded into constants."""
    rk = c.rk
    if not rk or c.ak:
        return None
    if set(rk) in ({"Identity"}, {"Dropout"}):
        # the reader is rewired to the eliminated node's input (it shows as modified): still the same rule
        return c.rw(c.generic, "eliminate", "EliminateIdentity" if rk[0] == "Identity" else "EliminateDropout")
    if not c.mod_new:
        if set(c.new.initializers) - set(c.old.initializers):
            return c.rw(f"{c.generic} (folded into constants)", "constant_folding", "ConstantFolding")
        return c.rw(c.generic, "eliminate")
    return None


def _rewired(c: _Changes) -> Rewrite | None:
    """Nodes modified in place and nothing else: their inputs or outputs now name other tensors."""
    if c.generic:
        return None
    return c.rw(f"{_count_text([op_key(n) for n in c.mod_new])} rewired", "rewired")


# The rewrite families, in the order they are tried: the first that recognizes a group names it.
_FAMILIES = (_layout, _qdq_fusion, _qdq_drop, _session_quantization, _qdq_placement, _float_fusion, _elimination,
             _rewired)
