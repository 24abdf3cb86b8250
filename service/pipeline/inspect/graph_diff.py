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
    removed, added = [], []
    budget = old_keys - new_keys
    for n in old.nodes:
        if budget[_key(n)] > 0:
            removed.append(n)
            budget[_key(n)] -= 1
    budget = new_keys - old_keys
    for n in new.nodes:
        if budget[_key(n)] > 0:
            added.append(n)
            budget[_key(n)] -= 1
    if not removed and not added:
        return LevelDiff(previous=previous, nodes_removed=0, nodes_added=0)

    old_t, new_t = _tensors(old.nodes), _tensors(new.nodes)
    inits = set(old.initializers) | set(new.initializers)
    vanished = (old_t - new_t) - inits
    appeared = (new_t - old_t) - inits

    uf = _UF()
    R = [("r", i) for i in range(len(removed))]
    A = [("a", j) for j in range(len(added))]
    for x in R + A:
        uf.find(x)

    # removed <-> removed through vanished tensors, cut at Q -> DQ edges
    prod_r = {o: i for i, n in enumerate(removed) for o in n.output if o}
    for j, n in enumerate(removed):
        for t in n.input:
            i = prod_r.get(t)
            if i is None or t not in vanished:
                continue
            if removed[i].op_type == "QuantizeLinear" and n.op_type == "DequantizeLinear":
                continue
            uf.union(("r", i), ("r", j))

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

    # unanchored new nodes join anchored new neighbours through appeared tensors
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
    for nodes in touching.values():  # the rest: among themselves
        free = [j for j in nodes if j not in anchored]
        for j in free[1:]:
            uf.union(("a", free[0]), ("a", j))

    groups: dict = {}
    for x in R + A:
        groups.setdefault(uf.find(x), []).append(x)

    rewrites = []
    # Once per diff, not per rewrite group: thousands of groups on a big graph made it quadratic.
    old_dq_inputs = {tuple(n.input) for n in old.nodes if n.op_type == "DequantizeLinear"}
    modified_removed = {i for i, _ in modified}
    for members in groups.values():
        r_idx = sorted(i for s, i in members if s == "r")
        a_idx = sorted(j for s, j in members if s == "a")
        rewrites.append(_classify(old, new, [removed[i] for i in r_idx], [added[j] for j in a_idx],
                                  {removed[i].name for i in r_idx if i in modified_removed}, old_dq_inputs))
    rewrites = _merge_s8_to_u8(rewrites, {n.name: op_key(n) for n in old.nodes})
    if previous in ("file", "disable_all", "basic"):
        # NhwcTransformer and NchwcTransformer are Level3 (layout) transformers: a channels-last node that
        # appears at extended or below is made by something else, so neither is named there.
        rewrites = [r.model_copy(update={"transformer": None}) if r.transformer in ("NhwcTransformer",
                                                                                     "NchwcTransformer") else r
                    for r in rewrites]
    return LevelDiff(previous=previous, nodes_removed=len(removed), nodes_added=len(added), rewrites=rewrites)


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


def _classify(old: GraphIndex, new: GraphIndex, rem: list, add: list, modified_names: set[str],
              old_dq_inputs: set[tuple[str, ...]]) -> Rewrite:
    """One group of removed/added nodes -> the rewrite it is. ``old_dq_inputs``: the input lists of
    the old graph's DequantizeLinear nodes."""
    rem_only = [n for n in rem if n.name not in modified_names]
    mod_new = [n for n in add if n.name in modified_names]
    add_only = [n for n in add if n.name not in modified_names]
    rk = [op_key(n) for n in rem_only]
    ak = [op_key(n) for n in add_only]
    base = dict(removed=[n.name for n in rem], added=[n.name for n in add], modified=sorted(modified_names))

    def rw(summary, kind, transformer=None):
        return Rewrite(summary=summary, kind=kind, transformer=transformer, **base)

    generic = f"{_count_text(rk)} -> {_count_text(ak)}" if rk and ak else (
        f"{_count_text(rk)} removed" if rk else f"{_count_text(ak)} added" if ak else "")

    if any(n.domain == NCHWC for n in add):
        return rw(f"{generic} (NCHWc)", "nchwc", "NchwcTransformer")
    nhwc = [n for n in add if n.domain == MS and (n.op_type.startswith("Nhwc") or any(
        a.name == "channels_last" and a.i == 1 for a in n.attribute))]
    if nhwc:
        return rw(f"{generic} (NHWC)", "nhwc", "NhwcTransformer")
    if not rem_only and ak and set(ak) == {"Transpose"} and not mod_new:
        return rw(f"Transpose inserted x{len(ak)}" if len(ak) > 1 else "Transpose inserted", "transpose",
                  "TransposeOptimizer")

    kernels = [n for n in add_only if op_key(n) in INT8_KERNELS]
    rem_q = [n for n in rem if n.op_type in QDQ_OPS]
    if kernels and rem_q:
        t = "QDQSelectorActionTransformer"
        if any(n.op_type == "Relu" for n in rem_only):
            t = f"{RELU_QUANT}, " + t
        elif any(n.op_type == "Clip" for n in rem_only):
            t = f"{CLIP_QUANT}, " + t
        was = {_zp_dtype(old, n) for n in rem_q} - {None}
        now = {new.dtypes.get(n.input[2]) if len(n.input) > 2 else None for n in kernels} - {None}
        suffix = ""
        if was == {"int8"} and now == {"uint8"}:
            suffix = " (int8 activations run as uint8)"
            t = "QDQS8ToU8Transformer, " + t
        return rw(generic + suffix, "qdq_fusion", t)

    # Q/DQ dropped around a data-movement op that now runs on int8
    if rem_q and not add_only and mod_new and all(n.op_type in QDQ_DROP_OPS for n in mod_new) and \
            all(k in QDQ_OPS for k in rk):
        ops = _count_text([op_key(n) for n in mod_new])
        # the dtype it now reads: uint8 on x86 when QDQS8ToU8Transformer converted the pair, else as written
        on = "/".join(sorted({new.dtypes.get(n.input[0]) or "8-bit" for n in mod_new})) or "8-bit"
        return rw(f"{_count_text(rk)} removed around {ops} (runs on {on})", "qdq_drop",
                  "QDQSelectorActionTransformer")

    # bias quantized to int32 at session time
    dq_i32 = [n for n in add_only if n.op_type == "DequantizeLinear" and new.dtypes.get(n.input[0]) == "int32"
              and n.input[0] in new.initializers]
    # WeightBiasQuantization (weight_bias_quantization.cc, registered in Level1 by graph_transformer_utils.cc unless
    # session.disable_quant_qdq=1): a Conv/ConvTranspose/Gemm whose input 0 comes from a DequantizeLinear with a
    # scalar (per-tensor) scale and whose single output reaches a QuantizeLinear through nothing but Relu/Clip,
    # no branch (IsNoBranchPathToQuantizeLinear). A float32 initializer weight is then quantized to int8 per tensor
    # with GetQuantizationParameter's min/max (asymmetric: its zero point comes from the range), and a 1-D
    # initializer bias to int32 at input scale x weight scale; a bias that is not an initializer stops both. A
    # ConvTranspose then still runs in float (no QDQ rule on the CPU EP), on the rounded weight.
    w_i8 = [c for n in add_only if n.op_type == "DequantizeLinear" and new.dtypes.get(n.input[0]) == "int8"
            and n.input[0] in new.initializers
            for c in new.consumers.get(n.output[0], []) if len(c.input) > 1 and c.input[1] == n.output[0]
            and c.op_type in BIASED_COMPUTE_OPS]
    if w_i8 and not rem_only:
        return rw(f"float weight of {_count_text([op_key(c) for c in w_i8])} quantized to int8 per tensor "
                  "(asymmetric)" + (", bias to int32" if dq_i32 else "")
                  + " (WeightBiasQuantization: a per-tensor DequantizeLinear before it, a QuantizeLinear after it)",
                  "bias_int32" if dq_i32 else "weight_int8", "WeightBiasQuantization")
    if dq_i32 and not rem_only:
        return rw("bias quantized to int32 (DequantizeLinear of int32 initializer added)"
                  + (f" x{len(dq_i32)}" if len(dq_i32) > 1 else ""), "bias_int32", "WeightBiasQuantization")

    # EnsureUniqueDQForNodeUnit: a DQ with the same inputs as one that was already there
    dups = [n for n in add_only if n.op_type == "DequantizeLinear" and tuple(n.input) in old_dq_inputs]
    if dups and not rem_only:
        return rw("DequantizeLinear duplicated for a shared input" + (f" x{len(dups)}" if len(dups) > 1 else ""),
                  "dq_duplicated", "EnsureUniqueDQForNodeUnit")

    if ak and set(ak) <= QDQ_OPS and not rem_only:
        return rw(f"{_count_text(ak)} inserted (Q/DQ propagated)", "qdq_propagation", "QDQPropagationTransformer")

    # int8 -> uint8 on Q/DQ rewritten in place
    pairs = [(o, n) for o in rem if o.name in modified_names for n in mod_new if n.name == o.name]
    if pairs and not rem_only and not add_only and any(
            _zp_dtype(old, o) == "int8" and _zp_dtype(new, n) == "uint8" for o, n in pairs):
        ops = _count_text([op_key(o) for o, _ in pairs])
        return rw(f"activations int8 -> uint8 ({ops} rewritten)", "s8_to_u8", "QDQS8ToU8Transformer")

    if rk and set(rk) <= ACTIVATIONS_ABSORBED_BY_Q and not add_only:
        t = RELU_QUANT if "Relu" in rk else CLIP_QUANT
        follow = [n.op_type for n in mod_new]
        into = " into QuantizeLinear" if "QuantizeLinear" in follow else ""
        return rw(f"{_count_text(rk)} absorbed{into}", "activation_absorbed", t)
    if "BatchNormalization" in rk and ("Conv" in rk or any(n.op_type == "Conv" for n in mod_new)):
        return rw("Conv + BatchNormalization -> Conv (BatchNormalization folded)", "conv_bn", "ConvBNFusion")
    if f"{MS}.FusedConv" in ak:
        return rw(generic, "conv_activation", "ConvActivationFusion")
    if "Gemm" in ak and "MatMul" in rk:
        return rw(generic, "matmul_add", "MatMulAddFusion")
    if f"{MS}.FusedMatMul" in ak:
        return rw(generic, "fused_matmul", "MatMulScaleFusion, MatmulTransposeFusion")
    if rk and not ak and set(rk) in ({"Identity"}, {"Dropout"}):
        # the reader is rewired to the eliminated node's input (it shows as modified): still the same rule
        return rw(generic, "eliminate", "EliminateIdentity" if rk[0] == "Identity" else "EliminateDropout")
    if rk and not ak and not mod_new:
        new_inits = set(new.initializers) - set(old.initializers)
        if new_inits:
            return rw(f"{generic} (folded into constants)", "constant_folding", "ConstantFolding")
        return rw(generic, "eliminate")
    if rk and "Conv" in [n.op_type for n in mod_new] and set(rk) <= {"Add", "Mul"}:
        return rw(f"Conv + {_count_text(rk)} -> Conv", "conv_fusion", "ConvAddFusion, ConvMulFusion")
    if not generic:
        ops = _count_text([op_key(n) for n in mod_new])
        return rw(f"{ops} rewired", "rewired")
    return rw(generic, "other")
