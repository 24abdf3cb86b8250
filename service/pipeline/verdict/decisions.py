"""The decisions table: for each quantization decision, where each artifact makes it.

"in the file" (the tool wrote it), "at session level L" (ORT does it while creating a session
at level L or above), "never", or "n/a (...)" when the model gives no occasion. Facts come from
the per-file inventory (``QuantizationInventory``) when the inspect stage produced one, and from
this stage's own reading of the file and of each optimized graph otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from service.pipeline.vocabulary import QDQ_FUSION_LIST
from service.schemas.options import ComparisonOptions
from service.schemas.levels import DecisionRow, OptimizedLevel
from service.schemas.report import QuantizationInventory

__all__ = ["decisions_table"]

FILE = "in the file"
NEVER = "never"


def _counts(c: dict[str, int]) -> str:
    return ", ".join(k if v == 1 else f"{k} x{v}" for k, v in sorted(c.items())) or "none"


def _first_level(levels: list[str], per_level: dict[str, OptimizedLevel],
                 pred: Callable[[OptimizedLevel], bool]) -> str | None:
    for lv in levels:
        ol = per_level.get(lv)
        if ol is not None and ol.error is None and ol.node_count and pred(ol):
            return lv
    return None


def _where(in_file: bool, levels, per_level, pred) -> str:
    if in_file:
        return FILE
    lv = _first_level(levels, per_level, pred)
    return f"at session level {lv}" if lv else NEVER


def _batchnorm_folding(left: int, n_bn: int, levels, per_level: dict[str, OptimizedLevel]) -> tuple[str, str]:
    """(where, detail) of Conv+BatchNorm folding for a file that keeps ``left`` of the fp32 model's
    ``n_bn`` BatchNormalization: where the first one folds, with the share when not all of them do
    (a BatchNormalization after a Relu has no Conv to fold into)."""
    bn = lambda ol: ol.op_histogram.get("BatchNormalization", 0)  # noqa: E731
    ran = [ol for lv in levels if (ol := per_level.get(lv)) is not None and ol.error is None and ol.node_count]
    fewest = min([left] + [bn(ol) for ol in ran])
    detail = f"{left} of {n_bn} in the file" + (f"; {fewest} fold at no level" if fewest else "")
    if left == 0:
        return FILE, detail
    lv = _first_level(levels, per_level, lambda ol: bn(ol) < left)
    share = "" if fewest == 0 else f" ({n_bn - fewest} of {n_bn})"
    if lv:
        return f"at session level {lv}{share}", detail
    return (f"{FILE}{share}", detail) if left < n_bn else (NEVER, detail)


@dataclass(frozen=True)
class _TableInputs:
    """What every column family of the decisions table reads."""
    names: list[str]
    files: dict
    optimized: dict[str, dict[str, OptimizedLevel]]
    inventories: dict[str, QuantizationInventory | None]
    levels: list[str]
    options: ComparisonOptions
    batchnorm_in_source: int

    @property
    def quantized(self) -> list[str]:
        return [n for n in self.names if n != "fp32"]

    @property
    def fp32_histogram(self) -> dict[str, int]:
        fp32 = self.files.get("fp32")
        return fp32.op_histogram if fp32 else {}


def decisions_table(*, names: list[str], files: dict, optimized: dict[str, dict[str, OptimizedLevel]],
                    inventories: dict[str, QuantizationInventory | None], levels: list[str],
                    options: ComparisonOptions, batchnorm_in_source: int = 0) -> list[DecisionRow]:
    """``batchnorm_in_source``: BatchNorm ops in the torch program the fp32 file was exported from
    (torch.onnx.export folds them into Conv, so the fp32 file itself no longer shows them). One builder
    per column family (_ROW_BUILDERS), in the table's order."""
    t = _TableInputs(names, files, optimized, inventories, levels, options, batchnorm_in_source)
    return [row for build in _ROW_BUILDERS for row in build(t)]


def _batchnorm_folding_rows(t: _TableInputs) -> list[DecisionRow]:
    """Conv + BatchNormalization folding."""
    rows: list[DecisionRow] = []
    where, detail = {}, {}
    n_bn = t.fp32_histogram.get("BatchNormalization", 0)
    for a in t.names:
        if a == "pt2e_qdq" and t.batchnorm_in_source:
            # The PT2E path quantizes the torch program, not the fp32 file: prepare_pt2e folds Conv+BN
            # (before inserting observers), so the file never has them, whatever the exporter does.
            where[a] = "before quantization (prepare_pt2e)"
            detail[a] = (f"the torch model has {t.batchnorm_in_source} BatchNorm; prepare_pt2e folds them into the Conv "
                         "weights before it inserts observers")
            continue
        if not n_bn and t.batchnorm_in_source:
            where[a] = "before quantization (torch.onnx.export)"
            detail[a] = (f"the torch model has {t.batchnorm_in_source} BatchNorm; the exporter folded them into Conv, "
                         "so every artifact starts from folded weights")
            continue
        if not n_bn:
            where[a] = "n/a (no BatchNormalization in the fp32 model)"
            continue
        where[a], detail[a] = _batchnorm_folding(t.files[a].op_histogram.get("BatchNormalization", 0), n_bn, t.levels,
                                                 t.optimized.get(a, {}))
    rows.append(DecisionRow(decision="Conv+BatchNorm folding", where=where, detail=detail))
    return rows


def _bias_rows(t: _TableInputs) -> list[DecisionRow]:
    """Bias to int32."""
    rows: list[DecisionRow] = []
    where, detail = {}, {}
    for a in t.quantized:
        inv = t.inventories.get(a)
        summary = inv.bias_summary if inv is not None else t.files[a].bias_summary
        if summary == "none" and t.files[a].bias_summary == "none":
            where[a] = "n/a (no bias)"
            continue
        where[a] = _where(summary == "int32", t.levels, t.optimized.get(a, {}), lambda ol: ol.bias.summary == "int32")
        detail[a] = f"file: {summary}; " + ", ".join(
            f"{lv}: {ol.bias.summary}" for lv, ol in t.optimized.get(a, {}).items() if not ol.error)
    rows.append(DecisionRow(decision="bias to int32", where=where, detail=detail))
    return rows


def _absorbed_activation_rows(t: _TableInputs) -> list[DecisionRow]:
    """Relu / Clip absorbed into QuantizeLinear."""
    rows: list[DecisionRow] = []
    where, detail = {}, {}
    n_act = t.fp32_histogram.get("Relu", 0) + t.fp32_histogram.get("Clip", 0)
    for a in t.quantized:
        if not n_act:
            where[a] = "n/a (no Relu or Clip in the fp32 model)"
            continue
        in_file_n = t.files[a].op_histogram.get("Relu", 0) + t.files[a].op_histogram.get("Clip", 0)
        where[a] = _where(in_file_n < n_act, t.levels, t.optimized.get(a, {}),
                          lambda ol: ol.op_histogram.get("Relu", 0) + ol.op_histogram.get("Clip", 0) < n_act)
        inv = t.inventories.get(a)
        ev = "; ".join(f.evidence for f in inv.folded_activations) if inv is not None else ""
        detail[a] = f"{in_file_n} of {n_act} Relu/Clip in the file" + (f" ({ev})" if ev else "")
    rows.append(DecisionRow(decision="Relu/Clip absorbed into QuantizeLinear", where=where, detail=detail))
    return rows


def _weight_rows(t: _TableInputs) -> list[DecisionRow]:
    """Weights: per-channel, symmetric."""
    rows: list[DecisionRow] = []
    pc_where, pc_detail, sym_where, sym_detail = {}, {}, {}, {}
    for a in t.quantized:
        inv = t.inventories.get(a)
        if inv is not None and any(t.role == "weight" for t in inv.tensors):
            ws = [{"per_channel": t.per_channel, "symmetric": t.symmetric} for t in inv.tensors if t.role == "weight"]
        else:
            ws = t.files[a].weights
        if not ws:
            pc_where[a] = sym_where[a] = "n/a (no quantized weights)"
            continue
        n_pc = sum(w["per_channel"] for w in ws)
        n_sym = sum(w["symmetric"] for w in ws)
        pc_where[a] = f"{FILE}: per-channel" if n_pc == len(ws) else (
            f"{FILE}: mixed" if n_pc else f"{NEVER} (per-tensor in the file)")
        pc_detail[a] = f"{n_pc} of {len(ws)} weights per-channel"
        sym_where[a] = f"{FILE}: symmetric" if n_sym == len(ws) else (
            f"{FILE}: mixed" if n_sym else f"{NEVER} (asymmetric in the file)")
        sym_detail[a] = f"{n_sym} of {len(ws)} weights with zero point at the midpoint"
    rows.append(DecisionRow(decision="per-channel weights", where=pc_where, detail=pc_detail))
    rows.append(DecisionRow(decision="symmetric weights", where=sym_where, detail=sym_detail))
    return rows


def _activation_dtype_rows(t: _TableInputs) -> list[DecisionRow]:
    """Activation dtype, as written and as run."""
    rows: list[DecisionRow] = []
    w_where, r_where, r_detail = {}, {}, {}
    for a in t.quantized:
        inv = t.inventories.get(a)
        written = sorted(set(inv.activation_dtypes)) if inv is not None and inv.activation_dtypes else \
            t.files[a].activation_dtypes
        w_where[a] = f"{FILE}: {'/'.join(written)}" if written else "n/a (no quantized activations)"
        per_level = t.optimized.get(a, {})
        run_by_level = {lv: sorted(k for k, v in ol.kernel_activation_dtypes.items() if v)
                        for lv, ol in per_level.items() if not ol.error}
        last = next((run_by_level[lv] for lv in reversed(t.levels) if run_by_level.get(lv)), [])
        if not last and not written:
            r_where[a] = "n/a (no quantized activations)"
        elif not last:
            r_where[a] = "never in an int8 kernel (float kernels between Q/DQ)"
        elif last == written:
            first = next(lv for lv in t.levels if run_by_level.get(lv) == last)
            r_where[a] = f"{'/'.join(last)} as written" + (f" (int8 kernels from level {first})" if
                                                           t.files[a].int8_kernels == {} else "")
        else:
            first = next((lv for lv in t.levels if run_by_level.get(lv) == last), t.levels[-1])
            why = " (QDQS8ToU8Transformer)" if last == ["uint8"] and written == ["int8"] else ""
            r_where[a] = f"{'/'.join(last)} from session level {first}{why}"
        r_detail[a] = ", ".join(f"{lv}: {'/'.join(v) or '-'}" for lv, v in run_by_level.items())
    rows.append(DecisionRow(decision="activation dtype (as written)", where=w_where))
    rows.append(DecisionRow(decision="activation dtype (as run)", where=r_where, detail=r_detail))
    return rows


def _kernel_rows(t: _TableInputs) -> list[DecisionRow]:
    """Int8 kernel choice."""
    rows: list[DecisionRow] = []
    where, detail = {}, {}
    for a in t.quantized:
        inv = t.inventories.get(a)
        in_file = dict(inv.int8_kernels_in_file) if inv is not None else t.files[a].int8_kernels
        per_level = t.optimized.get(a, {})
        if in_file:
            where[a] = f"{FILE} ({_counts(in_file)})"
        else:
            lv = _first_level(t.levels, per_level, lambda ol: bool(ol.int8_kernels))
            where[a] = f"at session level {lv} ({_counts(per_level[lv].int8_kernels)})" if lv else NEVER
        detail[a] = ", ".join(f"{lv}: {_counts(ol.int8_kernels)}" for lv, ol in per_level.items() if not ol.error)
    rows.append(DecisionRow(decision="int8 kernel choice", where=where, detail=detail))
    return rows


def _float_op_rows(t: _TableInputs) -> list[DecisionRow]:
    """Ops left in float."""
    rows: list[DecisionRow] = []
    where, detail = {}, {}
    for a in t.quantized:
        per_level = t.optimized.get(a, {})
        lv = next((lv for lv in reversed(t.levels) if lv in per_level and not per_level[lv].error), None)
        if lv is None:
            where[a] = "unknown (no level ran)"
            continue
        left = per_level[lv].ops_float
        if not left:
            where[a] = "none"
            continue
        inv = t.inventories.get(a)
        reasons = {op: per_level[lv].ops_float_reasons.get(op) or _float_reason(a, op, inv, t.options) for op in left}
        where[a] = "; ".join(f"{op}{'' if n == 1 else f' x{n}'} ({reasons[op]})" for op, n in sorted(left.items()))
        detail[a] = f"at level {lv}"
    rows.append(DecisionRow(decision="ops left in float", where=where, detail=detail))
    return rows


# The table's column families, in its order: a new decision is one builder here.
_ROW_BUILDERS = (_batchnorm_folding_rows, _bias_rows, _absorbed_activation_rows, _weight_rows, _activation_dtype_rows,
                 _kernel_rows, _float_op_rows)


def _float_reason(artifact: str, op: str, inv: QuantizationInventory | None, options: ComparisonOptions) -> str:
    if inv is not None and inv.ops_float_reasons.get(op):
        return inv.ops_float_reasons[op]
    o = options.ort
    if artifact.startswith("ort_") and o.op_types_to_quantize and op not in o.op_types_to_quantize:
        return "excluded by op_types_to_quantize"
    if artifact.startswith("ort_") and o.nodes_to_exclude:
        return "possibly excluded by nodes_to_exclude"
    if op not in QDQ_FUSION_LIST:
        return "not in ORT's QDQ fusion list: runs in float between DequantizeLinear and QuantizeLinear"
    return "no Q/DQ around it in the file: not annotated by the quantizer"
