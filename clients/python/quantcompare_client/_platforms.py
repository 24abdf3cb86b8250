"""Another platform's view of the same files (the report's ``platforms``): arm64 as emulated ORT, and the
targets (``qnn:<soc>``, ``openvino:cpu``, ``ort:<version>``), side by side with the machine that ran the job."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional


class Platform:
    """One entry of ``report.platforms``: ``status`` ``ok`` or ``unavailable`` (then ``error`` says why).

    >>> p = report.platforms["arm64"]
    >>> p.int8_coverage("ort_qdq", "extended"), p.latency      # latency: "not measured: emulated"
    >>> p.side_by_side()                                       # rows: here | arm64 per artifact and level
    >>> q = report.platforms["qnn:69"]                          # a target that compiles the file itself
    >>> q.compiles("ort_qdq"), q.nodes_taken("pt2e_qdq"), q.sqnr_db("ort_qdq"), q.differences()
    """

    def __init__(self, name: str, data: Mapping[str, Any]) -> None:
        self.name = name
        self.raw: Dict[str, Any] = dict(data)
        self.status: str = str(self.raw.get("status", ""))
        self.error: Optional[Dict[str, Any]] = self.raw.get("error") if isinstance(self.raw.get("error"), dict) else None
        self.cpu: Optional[str] = self.raw.get("cpu")
        self.emulated: bool = bool(self.raw.get("emulated"))
        self.latency: str = str(self.raw.get("latency") or "")
        self.accuracy: Optional[Dict[str, Any]] = self.raw.get("accuracy") if isinstance(self.raw.get("accuracy"), dict) else None
        self.optimized: Dict[str, Dict[str, Any]] = dict(self.raw.get("optimized") or {})
        self.kind: str = str(self.raw.get("kind") or "emulated")  # emulated | ort | qnn | openvino
        self.target: Optional[str] = self.raw.get("target")
        # Per artifact (targets): status, error, hint, nodes_taken, nodes_left, fallback, numerics, latency, ...
        self.artifacts: Dict[str, Dict[str, Any]] = dict(self.raw.get("artifacts") or {})

    def compiles(self, artifact: str) -> Optional[bool]:
        """The target compiled the file (and did not silently fall back to ORT's CPU EP); None: not run there."""
        art = self.artifacts.get(artifact)
        return None if art is None else art.get("status") == "ok"

    def nodes_taken(self, artifact: str) -> Optional[int]:
        return (self.artifacts.get(artifact) or {}).get("nodes_taken")

    def differences(self) -> List[str]:
        """Every difference from the machine that ran the job, with its reason, in words."""
        return [d for r in self.side_by_side() for d in r.get("differences") or []]

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def int8_coverage(self, artifact: str, level: str = "all") -> Optional[float]:
        return (self.optimized.get(artifact, {}).get(level) or {}).get("int8_coverage")

    def sqnr_db(self, artifact: str, level: str = "all") -> Optional[float]:
        """The worst output's SQNR on this platform against the report's fp32 reference (a target that compiles the
        file itself has no level)."""
        if self.kind in ("qnn", "openvino"):
            numerics = (self.artifacts.get(artifact) or {}).get("numerics") or {}
        else:
            numerics = (self.optimized.get(artifact, {}).get(level) or {}).get("numerics") or {}
        values = [o.get("sqnr_db") for o in numerics.get("outputs") or [] if o.get("sqnr_db") is not None]
        return min(values) if values else None

    def side_by_side(self, *, differing_only: bool = False) -> List[Dict[str, Any]]:
        """One row per artifact x level: int8 coverage and fused kernels here | there, the blockers that
        differ, and the ORT rule that explains each difference."""
        rows = [dict(r) for r in self.raw.get("side_by_side") or [] if isinstance(r, dict)]
        return [r for r in rows if not r.get("same")] if differing_only else rows

    def __repr__(self) -> str:
        if not self.ok:
            return f"<Platform {self.name} {self.status}: {(self.error or {}).get('code')}>"
        differ = sum(1 for r in self.side_by_side() if not r.get("same"))
        return f"<Platform {self.name} ({self.cpu}) kind={self.kind} emulated={self.emulated}: {differ} row(s) differ>"


def platforms_from(raw: Any) -> Dict[str, Platform]:
    return {str(k): Platform(str(k), v) for k, v in (raw or {}).items() if isinstance(v, dict)}
