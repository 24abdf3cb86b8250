"""``report.layers``: per-tensor error of each quantized file against fp32 (read-only views).

    >>> report.layers.worst["ort_qdq"]                  # the tensor with the lowest SQNR
    >>> report.layers.row("conv2d_1").artifacts["pt2e_qdq"].sqnr_db
    >>> [o.summary for o in report.layers.origins]       # where error appears, not where it is inherited
    >>> report.layers.to_rows()                         # flat dicts, e.g. for pandas.DataFrame
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["Layers", "LayerRow", "LayerCell", "LayerOrigin"]


def _f(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _interval(value: Any) -> Optional[Tuple[float, float]]:
    if not isinstance(value, (list, tuple)) or len(value) != 2 or _f(value[0]) is None:
        return None
    return (float(value[0]), math.inf if value[1] is None else float(value[1]))


@dataclass(frozen=True)
class LayerCell:
    """One fp32 tensor in one quantized file. ``sqnr_db`` is ``math.inf`` when identical to fp32."""

    sqnr_db: Optional[float]
    cosine: Optional[float]
    max_abs_error: Optional[float]
    max_abs_error_lsb: Optional[float]
    clipped_share: Optional[float]
    scale: Optional[float]
    zero_point: Optional[int]
    drop_db: Optional[float]
    file_tensor: str
    alignment: str = field(repr=False)
    # SQNR at the other levels where the tensor still exists (options.layers.by_level); inf = exact.
    by_level: Dict[str, float] = field(default_factory=dict, repr=False)
    # values that are inf or NaN in the file where fp32 has a number (sqnr_db is then the floor, -200)
    nonfinite: int = 0
    # 95% bootstrap interval of sqnr_db over the samples: (low, high), high inf when unbounded; None without one
    sqnr_db_ci: Optional[Tuple[float, float]] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LayerCell":
        sqnr = math.inf if "sqnr_db" in d and d["sqnr_db"] is None else _f(d.get("sqnr_db"))
        zp = d.get("zero_point")
        return cls(sqnr, _f(d.get("cosine")), _f(d.get("max_abs_error")), _f(d.get("max_abs_error_lsb")),
                   _f(d.get("clipped_share")), _f(d.get("scale")), int(zp) if isinstance(zp, int) else None,
                   _f(d.get("drop_db")), str(d.get("file_tensor", "")), str(d.get("alignment", "")),
                   {str(k): (math.inf if v is None else float(v)) for k, v in (d.get("by_level") or {}).items()
                    if v is None or _f(v) is not None},
                   nonfinite=int(d.get("nonfinite") or 0), sqnr_db_ci=_interval(d.get("sqnr_db_ci")))


@dataclass(frozen=True)
class LayerRow:
    tensor: str
    op_type: str
    depth: int
    artifacts: Dict[str, LayerCell]
    left_out: Dict[str, str] = field(default_factory=dict, repr=False)
    explanation: Optional[str] = field(default=None, repr=False)
    node: str = field(default="", repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LayerRow":
        cells = {str(a): LayerCell.from_dict(c) for a, c in (d.get("artifacts") or {}).items() if isinstance(c, dict)}
        return cls(str(d.get("tensor", "")), str(d.get("op_type", "")), int(d.get("depth") or 0), cells,
                   {str(k): str(v) for k, v in (d.get("left_out") or {}).items()}, d.get("explanation"),
                   str(d.get("node", "")))


@dataclass(frozen=True)
class LayerOrigin:
    artifact: str
    tensor: str
    drop_db: Optional[float]
    summary: str

    def __str__(self) -> str:
        return self.summary


class Layers:
    def __init__(self, data: Mapping[str, Any]) -> None:
        self.raw: Dict[str, Any] = dict(data)
        self.rows: List[LayerRow] = [LayerRow.from_dict(r) for r in data.get("rows") or [] if isinstance(r, dict)]
        self.worst: Dict[str, str] = {str(k): str(v) for k, v in (data.get("worst") or {}).items()}
        self.origins: List[LayerOrigin] = [
            LayerOrigin(str(o.get("artifact", "")), str(o.get("tensor", "")), _f(o.get("drop_db")), str(o.get("summary", "")))
            for o in data.get("origins") or [] if isinstance(o, dict)
        ]
        self.aligned_all_share: Optional[float] = _f(data.get("aligned_all_share"))
        self.samples: Optional[int] = data.get("samples")
        self.retry: Optional[Dict[str, Any]] = data.get("retry")

    def row(self, tensor: str) -> Optional[LayerRow]:
        return next((r for r in self.rows if r.tensor == tensor), None)

    def to_rows(self) -> List[Dict[str, Any]]:
        """One flat dict per (tensor, artifact), e.g. ``pandas.DataFrame(report.layers.to_rows())``."""
        out = []
        for r in self.rows:
            for a, c in r.artifacts.items():
                out.append({"tensor": r.tensor, "op_type": r.op_type, "depth": r.depth, "artifact": a,
                            "sqnr_db": c.sqnr_db, "sqnr_db_ci": c.sqnr_db_ci, "drop_db": c.drop_db, "cosine": c.cosine,
                            "max_abs_error": c.max_abs_error, "max_abs_error_lsb": c.max_abs_error_lsb,
                            "clipped_share": c.clipped_share, "scale": c.scale, "zero_point": c.zero_point,
                            "nonfinite": c.nonfinite})
        return out

    def __repr__(self) -> str:
        return (f"<Layers {len(self.rows)} tensors, worst {self.worst}, "
                f"{len(self.origins)} origins>")

    def _repr_html_(self) -> str:
        e = html.escape
        arts = sorted({a for r in self.rows for a in r.artifacts})

        def worst(r: LayerRow) -> float:
            vals = [c.sqnr_db for c in r.artifacts.values() if c.sqnr_db is not None]
            return min(vals) if vals else math.inf

        parts = ["<table><caption>worst tensors (SQNR dB vs fp32)</caption><thead><tr><th>tensor</th><th>op</th>",
                 "".join(f"<th>{e(a)}</th>" for a in arts), "</tr></thead><tbody>"]
        for r in sorted(self.rows, key=worst)[:10]:
            cells = "".join(
                f"<td>{'' if a not in r.artifacts else e(format(r.artifacts[a].sqnr_db or 0.0, '.1f'))}</td>" for a in arts)
            parts.append(f"<tr><td><code>{e(r.tensor)}</code></td><td>{e(r.op_type)}</td>{cells}</tr>")
        parts.append("</tbody></table>")
        return "".join(parts)
