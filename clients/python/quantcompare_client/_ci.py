"""What ``check`` leaves for a CI system: JUnit XML and a Markdown step summary, from a :class:`Report`.

JUnit: one ``<testcase>`` per gate, a ``<failure>`` with the gate's message when it failed, and the
figures as ``<properties>`` inside the testcase (where pytest's ``record_property`` puts them, so
GitLab's ``artifacts:reports:junit`` and the GitHub test-report actions read the file as they read
pytest's). Markdown: artifacts x key figures at the gated level, with deltas against a baseline
report when one is given, then the verdict and a link to the report page.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Optional, Sequence

from ._gates import figure_from_report, parse_gate

__all__ = ["junit_from_report", "junit_from_error", "markdown_from_report", "gated_level"]

# (column title, gate metric or row key, format); the figures a reviewer looks at first.
KEY_FIGURES = (
    ("SQNR dB", "sqnr_db", ".2f"),
    ("cosine", "cosine", ".5f"),
    ("max abs err", "max_abs_error", ".3g"),
    ("int8 coverage", "int8_coverage", "%"),
    ("median ms", "median_ms", ".3f"),
    ("× fp32", "latency_ratio", ".2f"),
)
_MISSING = figure_from_report.MISSING  # type: ignore[attr-defined]


def gated_level(gates: Sequence[Dict[str, Any]], default: str = "all") -> str:
    """The level the gates read (the first metric gate's); ``default`` when no gate names one."""
    for gate in gates:
        if gate.get("metric") != "status_ok":
            return str(gate.get("level", default))
    return default


def _figure(report: Any, artifact: str, level: str, key: str) -> Any:
    if key == "median_ms":
        value = report.median_ms(artifact, level)
        return _MISSING if value is None else value
    if artifact == "fp32" and key in ("latency_ratio", "int8_coverage", "sqnr_db", "cosine", "max_abs_error"):
        return _MISSING  # fp32 is the reference those figures are measured against
    return figure_from_report(report, artifact, level, key)


def _fmt(value: Any, spec: str) -> str:
    if value is _MISSING:
        return "–"
    if value is None:
        return "exact"  # SQNR of an output without error
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if spec == "%":
        return f"{value * 100:.1f}%"
    return format(value, spec)


def _fmt_delta(new: Any, old: Any, spec: str) -> str:
    if new is _MISSING or old is _MISSING:
        return " (no baseline)" if old is _MISSING and new is not _MISSING else ""
    if new is None or old is None:
        return "" if new is old else " (Δ n/a)"
    delta = new - old
    if spec == "%":
        return f" (Δ {delta * 100:+.1f} pp)"
    return f" (Δ {format(delta, '+' + spec)})"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_from_report(report: Any, *, level: str = "all", baseline: Any = None,
                         report_url: Optional[str] = None, title: str = "quantcompare") -> str:
    """A step summary: the key figures per artifact at ``level`` (Δ vs ``baseline``), the verdict, a link."""
    v = report.verdict
    n, ok = len(v.gates), sum(g.passed for g in v.gates)
    word = "✅ PASSED" if v.passed else "❌ FAILED"
    lines: List[str] = [
        f"### {title}: {_md_cell(report.model.name or '?')} — {word}" + (f" ({ok}/{n} gates)" if n else " (no gates)"),
        "",
    ]
    bits = [f"level `{level}`"]
    if baseline is not None:
        bits.append(f"Δ against baseline `{baseline.id or 'report.json'}`")
    if report_url:
        bits.append(f"[report page]({report_url})")
    lines += [" · ".join(bits), ""]
    lines.append("| artifact | status | " + " | ".join(t for t, _, _ in KEY_FIGURES) + " |")
    lines.append("|---|---|" + "---:|" * len(KEY_FIGURES))
    for name, art in report.artifacts.items():
        cells = [f"`{name}`", _md_cell(art.status)]
        for _, key, spec in KEY_FIGURES:
            new = _figure(report, name, level, key)
            text = _fmt(new, spec)
            if baseline is not None and name != "fp32":
                text += _fmt_delta(new, _figure(baseline, name, level, key), spec)
            cells.append(_md_cell(text))
        lines.append("| " + " | ".join(cells) + " |")
    if v.gates:
        lines += ["", "| | gate | actual | baseline | Δ | message |", "|---|---|---:|---:|---:|---|"]
        for g in v.gates:
            lines.append("| " + " | ".join([
                "✅" if g.passed else "❌", f"`{_md_cell(g.gate)}`", _num(g.actual), _num(g.baseline),
                "" if g.delta is None else f"{g.delta:+.4g}", _md_cell(g.message),
            ]) + " |")
    failed = [a for a in report.artifacts.values() if a.error]
    if failed:
        lines.append("")
        lines += [f"- `{a.name}` {a.status}: {_md_cell(str(a.error))[:300]}" for a in failed]
    return "\n".join(lines) + "\n"


def _num(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.6g}"


def _properties(parent: ET.Element, props: Dict[str, Any]) -> None:
    el = ET.SubElement(parent, "properties")
    for key, value in props.items():
        if value is not None:
            ET.SubElement(el, "property", name=key, value=str(value))


def junit_from_report(report: Any, *, report_url: Optional[str] = None, baseline: Any = None) -> str:
    """JUnit XML: a testsuite for the comparison, a testcase per gate, a failure per failed gate."""
    v = report.verdict
    failures = sum(not g.passed for g in v.gates)
    total_s = sum(report.timings.values()) if report.timings else 0.0
    suites = ET.Element("testsuites", name="quantcompare", tests=str(len(v.gates)), failures=str(failures),
                        errors="0", time=f"{total_s:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=f"quantcompare {report.model.name or ''}".strip(),
                          tests=str(len(v.gates)), failures=str(failures), errors="0", skipped="0",
                          time=f"{total_s:.3f}",
                          timestamp=report.created_at.strftime("%Y-%m-%dT%H:%M:%S") if report.created_at else "")
    versions = report.environment.get("versions") if isinstance(report.environment.get("versions"), dict) else {}
    _properties(suite, {
        "report_id": report.id, "report_url": report_url, "model": report.model.name, "model_sha256": report.model.sha256,
        "baseline_id": getattr(baseline, "id", None) or report.options.get("baseline"),
        **{f"version.{k}": versions.get(k) for k in ("torch", "torchao", "onnxruntime", "onnx")},
    })
    classname = f"quantcompare.{report.model.name or 'model'}"
    for g in v.gates:
        case = ET.SubElement(suite, "testcase", classname=classname, name=g.gate, time="0")
        _properties(case, _gate_figures(report, g))
        if not g.passed:
            failure = ET.SubElement(case, "failure", message=g.message, type="gate")
            failure.text = f"{g.gate}: {g.message}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _gate_figures(report: Any, g: Any) -> Dict[str, Any]:
    props: Dict[str, Any] = {"actual": g.actual, "baseline": g.baseline, "delta": g.delta}
    try:
        gate = parse_gate(g.gate)
    except ValueError:
        return props
    if gate["metric"] == "status_ok":
        names = [gate["artifact"]] if gate["artifact"] != "*" else [n for n in report.artifacts if n != "fp32"]
        props.update({f"{n}.status": report.artifacts[n].status for n in names if n in report.artifacts})
        return props
    names = [gate["artifact"]] if gate["artifact"] != "*" else [n for n in report.artifacts if n != "fp32"]
    for name in names:
        value = figure_from_report(report, name, gate["level"], gate["metric"])
        if value is not _MISSING:
            props[f"{name}.{gate['level']}.{gate['metric']}"] = "inf" if value is None else f"{value:.6g}"
    return props


def junit_from_error(message: str, *, name: str = "quantcompare check") -> str:
    """JUnit XML for a check that could not run (exit 2): one testcase with an ``<error>``."""
    suites = ET.Element("testsuites", name="quantcompare", tests="1", failures="0", errors="1", time="0")
    suite = ET.SubElement(suites, "testsuite", name="quantcompare", tests="1", failures="0", errors="1",
                          skipped="0", time="0")
    case = ET.SubElement(suite, "testcase", classname="quantcompare", name=name, time="0")
    error = ET.SubElement(case, "error", message=message.splitlines()[0][:500] if message else "error", type="error")
    error.text = message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
