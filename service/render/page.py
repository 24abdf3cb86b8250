"""report.html: the report as a page a person reads (Jinja2 template + server-side SVG).

The report JSON is read as plain dicts with ``.get`` everywhere: a section that a report does
not have (an older schema, a failed path, a stage that did not run) renders as
"not available" instead of failing the page.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from service.render.profile_view import profile_bars_svg, profiled_level

from service.schemas.options import LEVELS
from service.pipeline.files import split_name
from service.pipeline.verdict.made_up_data import made_up_data_banner
from service.pipeline.verdict.headline import headline_from_report
from service.render import svg
from service.render.graphs.svg import DotUnavailable, graph_svg
from service.render.graphs.view import KINDS, graph_view
from service.render.layers_svg import sqnr_by_depth, worst_rows
from service.render.units import accuracy_word, human_size
from service.render.why_float import advice_rows, blocker_groups
from service.schemas.report import SamplesInfo

_env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                   autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
_ORDER = ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator", "nncf_qdq", "modelopt_qdq", "quark_qdq")
MAX_TENSOR_ROWS = 40


def _num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            return "∞" if v > 0 else "–"
        if isinstance(v, int):
            return f"{v:,}"
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}" if abs(v) < 0.01 else f"{v:.{digits}f}".rstrip("0").rstrip(".")
    return str(v)


def _pct(v: Any) -> str:
    return f"{100 * v:.0f}%" if isinstance(v, (int, float)) else "–"


def _pct1(v: Any) -> str:
    """A share that must not round to 0% when it is not 0 (one label in a thousand differs)."""
    return f"{100 * v:.1f}%" if isinstance(v, (int, float)) else "–"


def _sqnr(v: Any) -> str:
    if v == "shape":  # no output compares element-wise (every one follows a NonMaxSuppression, ...)
        return "shape only"
    if v == "labels":  # every output compared is an integer (labels, indices): no SQNR
        return "exact only"
    if isinstance(v, str):  # the figures that judge the outputs instead, or "not measured" (units.accuracy_word)
        return v
    return "∞ (exact)" if v is None else f"{_num(v, 3)} dB"


_env.filters.update(num=_num, size=human_size, pct=_pct, pct1=_pct1, sqnr=_sqnr)


def _profile_view(report: dict) -> dict:
    """What the ``_profile.html`` partial draws: the stacked bars and each sentence where an artifact loses."""
    level, profiles = profiled_level(report)
    return {"level": level, "svg": profile_bars_svg(report),
            "sentences": [p["where_it_loses"] for p in profiles.values() if p.get("where_it_loses")]}


_env.globals.update(sqnr_cell=lambda level: _sqnr_cell(level or {}), profile_view=_profile_view)


def _levels(report: dict, arts: dict) -> list[str]:
    seen = set((report.get("options") or {}).get("levels") or [])
    for a in arts.values():
        seen |= set((a.get("optimized") or {}).keys())
    return [lv for lv in LEVELS if lv in seen] + sorted(seen - set(LEVELS))


def _worst_sqnr(level: dict | None) -> float | None:
    num = (level or {}).get("numerics") or {}
    return num.get("worst_sqnr_db")


def _sqnr_cell(level: dict) -> float | str | None:
    """What the SQNR cell of a level shows: its worst SQNR, or when no output is judged by SQNR what judges
    them (units.accuracy_word: "shape", "labels", an angular error, "not measured", ...)."""
    num = level.get("numerics") or {}
    word = accuracy_word(num)
    return word if word is not None else num.get("worst_sqnr_db")


def _output_rows(optimized: dict, levels: list[str]) -> list[dict]:
    """Per output at the highest level with numerics, when some output is not judged by SQNR: the figure that
    judges it and how it was measured, or why it has none."""
    level = next((lv for lv in reversed(levels) if ((optimized.get(lv) or {}).get("numerics") or {}).get("outputs")),
                 None)
    outs = ((optimized.get(level) or {}).get("numerics") or {}).get("outputs") or [] if level else []
    if all(o.get("judged_by") == "sqnr" for o in outs):
        return []
    rows = []
    for o in outs:
        by = o.get("judged_by")
        figure = {"sqnr": _sqnr(o.get("sqnr_db")), "mismatch_share": _pct1(o.get("mismatch_share")) + " differ",
                  "angular_error": f"max {_num(o.get('angular_error_max'), 3)} rad, mean {_num(o.get('angular_error_mean'), 3)} rad",
                  "argmax_agreement": _pct1(o.get("argmax_agreement")) + " rows agree"}.get(by, "not measured")
        how = {"sqnr": "SQNR over the elements", "mismatch_share": "exact comparison (labels, indices)",
               "angular_error": "angular error: the difference wrapped into [-pi, pi)",
               "argmax_agreement": "argmax over the last axis"}.get(by, o.get("not_measured") or "")
        rows.append({"level": level, "name": o.get("name"), "judged_by": by or "not measured", "figure": figure,
                     "how": how, "kind": o.get("kind_detail") or "", "sqnr": _sqnr(o.get("sqnr_db"))
                     if o.get("compared") == "elementwise" else "–"})
    return rows


def _noisy(level: dict | None) -> str | None:
    """Why a latency is marked noisy ('' when it is not), for the page's warning marks."""
    lat = (level or {}).get("latency") or {}
    if not lat.get("noisy"):
        return None
    load = f"; load average {lat['load_avg_1m']:.2f}" if lat.get("load_avg_1m") is not None else ""
    jobs = f"; {lat['concurrent_jobs']} jobs running" if lat.get("concurrent_jobs") else ""
    return "; ".join(lat.get("noisy_reasons") or ["noisy"]) + load + jobs


def _latency(level: dict | None) -> float | None:
    return ((level or {}).get("latency") or {}).get("median_ms")


def _hist_matrix(optimized: dict, levels: list[str]) -> dict:
    keys: list[str] = []
    for lv in levels:
        for k in ((optimized.get(lv) or {}).get("op_histogram") or {}):
            if k not in keys:
                keys.append(k)
    rows = []
    for k in keys:
        cells, prev = [], None
        for lv in levels:
            h = (optimized.get(lv) or {}).get("op_histogram")
            n = None if h is None else h.get(k, 0)
            cells.append({"n": n, "changed": prev is not None and n is not None and n != prev})
            prev = n if n is not None else prev
        rows.append({"op": k, "cells": cells})
    return {"rows": rows}


def _rewrites(optimized: dict, levels: list[str]) -> list[dict]:
    out = []
    for lv in levels:
        diff = (optimized.get(lv) or {}).get("diff")
        if not diff:
            continue
        groups: dict[str, dict] = {}
        for rw in diff.get("rewrites") or []:
            s = rw.get("summary") or "?"
            g = groups.setdefault(s, {"summary": s, "kind": rw.get("kind"), "transformer": rw.get("transformer"),
                                      "confirmed": rw.get("confirmed"), "count": 0, "svg": svg.rewrite_drawing(s)})
            g["count"] += 1
        out.append({"level": lv, "previous": diff.get("previous"), "removed": diff.get("nodes_removed"),
                    "added": diff.get("nodes_added"), "groups": list(groups.values())})
    return out


def _headline(report: dict) -> dict:
    """The report's headline; computed by the same function for a report that has none (partial, older)."""
    if report.get("headline"):
        return report["headline"]
    made = headline_from_report(report, made_up_data=_made_up_banner(report.get("samples"))).model_dump(mode="json")
    if report.get("partial"):  # the gates are decided with the finished report: no file is named before
        made.update(choice=None, sentence="Running: which file to ship comes with the finished report; "
                                          "the cards fill in as sections finish.",
                    cards=[{**c, "chosen": False, "verdict": ""} for c in made["cards"]])
    return made


def _graphs(report: dict, names: list[str], level: str | None, job_id: str) -> list[dict]:
    """Each quantized artifact's graph at ``level``, drawn (Graphviz), with its node table and downloads."""
    out = []
    for n in names:
        opt = ((report.get("artifacts") or {}).get(n) or {}).get("optimized") or {}
        lv = opt.get(level) if level else None
        if not lv or not lv.get("nodes"):
            continue
        view = graph_view(lv, artifact=n, level_name=level, layers=report.get("layers"))
        try:
            drawing, error = graph_svg(view), None
        except DotUnavailable as e:
            drawing, error = None, str(e)
        counts = view.counts()
        out.append({"artifact": n, "level": level, "view": view, "svg": drawing, "error": error, "counts": counts,
                    "summary": ", ".join(f"{counts.get(k, 0)} {KINDS[k][2].split(',')[0].split(' (')[0]}" for k in KINDS if counts.get(k)),
                    "node_data_url": f"/v1/comparisons/{job_id}/artifacts/{n}.{level}.node_data.json",
                    "graph_url": f"/v1/comparisons/{job_id}/artifacts/{n}.{level}.onnx"})
    return out


def build_view(report: dict, files: list[tuple[str, int]], job_id: str, *, graph_level: str | None = None) -> dict:
    raw_arts = report.get("artifacts") or {}
    names = [n for n in _ORDER if n in raw_arts] + sorted(n for n in raw_arts if n not in _ORDER)
    arts = {n: raw_arts[n] for n in names}
    quant = [n for n in names if n != "fp32"]
    levels = _levels(report, arts)
    last = levels[-1] if levels else None
    fp32_opt = (arts.get("fp32") or {}).get("optimized") or {}

    glance = []
    for n in quant:
        a = arts[n]
        q = a.get("quantization") or {}
        f = a.get("file") or {}
        at = ((a.get("optimized") or {}).get(last) or {}) if last else {}
        lat, ref = _latency(at), _latency(fp32_opt.get(last)) if last else None
        glance.append({
            "name": n, "status": a.get("status", "?"), "error": a.get("error"),
            "accuracy": a.get("accuracy"), "accuracy_note": a.get("accuracy_note"),
            "tool": (a.get("tool") or {}).get("name"), "calibration": (a.get("tool") or {}).get("calibration"),
            "size": f.get("size"), "format": q.get("format"), "qdq": (q.get("quantize_linear"), q.get("dequantize_linear")),
            "weights": q.get("weights"), "bias": q.get("bias_summary"),
            "folded": ", ".join(f"{x.get('op_type')} ×{x.get('count')}" for x in q.get("folded_activations") or []) or "none",
            "act_dtypes": ", ".join(q.get("activation_dtypes") or []) or "–",
            "weight_dtypes": ", ".join(q.get("weight_dtypes") or []) or "–",
            "coverage": at.get("int8_coverage"), "sqnr": _sqnr_cell(at) if at.get("numerics") else "na",
            "mismatch": (at.get("numerics") or {}).get("worst_mismatch_share"),
            "cosine": (at.get("numerics") or {}).get("worst_cosine"), "latency": lat,
            "ratio": (lat / ref) if lat and ref else None, "nodes": at.get("node_count"),
            "latency_noisy": _noisy(at) or _noisy(fp32_opt.get(last) if last else None),
            "kernels": ", ".join(f"{k} ×{v}" for k, v in (at.get("int8_kernels") or {}).items()) or "none",
        })

    per_artifact = []
    for n in names:
        a = arts[n]
        opt = a.get("optimized") or {}
        per_artifact.append({
            "name": n, "a": a, "levels": [(lv, opt.get(lv)) for lv in levels],
            "hist": _hist_matrix(opt, levels), "rewrites": _rewrites(opt, levels),
            "outputs": _output_rows(opt, levels) if n != "fp32" else [],
            "tensors": ((a.get("quantization") or {}).get("tensors") or [])[:MAX_TENSOR_ROWS],
            "tensors_more": max(0, len((a.get("quantization") or {}).get("tensors") or []) - MAX_TENSOR_ROWS),
        })

    charts = {
        "sqnr": svg.bar_chart(levels, {n: [_worst_sqnr((arts[n].get("optimized") or {}).get(lv)) for lv in levels]
                                       for n in quant}, title="SQNR vs fp32 (worst output; higher is better)", unit="dB"),
        "latency": svg.bar_chart(levels, {n: [_latency((arts[n].get("optimized") or {}).get(lv)) for lv in levels]
                                          for n in names}, title="Latency per run (median; lower is better)", unit="ms"),
    }
    downloads = []
    for fname, size in files:
        art, lv = split_name(fname)
        downloads.append({"name": fname, "artifact": art, "level": lv, "size": size,
                          "url": f"/v1/comparisons/{job_id}/artifacts/{fname}",
                          # Model Explorer's node data for this level graph (routes/artifacts.py makes it from the report)
                          "node_data": f"/v1/comparisons/{job_id}/artifacts/{art}.{lv}.node_data.json"
                          if lv in LEVELS and fname == f"{art}.{lv}.onnx" else None})
    lint_counts = Counter((x.get("severity") or "warning") for x in report.get("lints") or [])
    latency_protocol = next((((o or {}).get("latency") or {}).get("protocol") for a in arts.values()
                             for o in ((a.get("optimized") or {}).values()) if ((o or {}).get("latency") or {}).get("protocol")),
                            None)
    layers = report.get("layers") or None
    layer_view = None if not layers else {
        "chart": sqnr_by_depth(layers), "worst": worst_rows(layers, 10), "l": layers,
        "arts": [n for n in quant if any(n in (r.get("artifacts") or {}) for r in layers.get("rows") or [])],
    }
    why = {"groups": blocker_groups(report), "advice": advice_rows(report), "refuted": advice_rows(report, refuted=True),
           "not_run": advice_rows(report, not_run=True)}
    headline = _headline(report)
    folds = _fold_summaries(report, names, levels, per_artifact, why)
    level_drawn = graph_level if graph_level in levels else headline.get("level")
    return {"r": report, "why": why, "headline": headline, "kinds": KINDS, "graph_level": level_drawn, "folds": folds,
            "graphs": _graphs(report, quant, level_drawn, job_id), "arts": arts, "names": names, "quant": quant, "levels": levels, "last": last,
            "latency_protocol": latency_protocol,
            "layers": layer_view,
            "glance": glance, "per_artifact": per_artifact, "charts": charts, "downloads": downloads,
            "colors": {n: svg.color(n, i) for i, n in enumerate(names)}, "lint_counts": dict(lint_counts),
            "made_up_banner": _made_up_banner(report.get("samples"))}


def _fold_summaries(report: dict, names: list[str], levels: list[str], per_artifact: list[dict], why: dict) -> dict:
    """The one line each folded section shows closed: what is inside, with its counts."""
    quant = [n for n in names if n != "fp32"]
    steps: Counter = Counter()
    for pa in per_artifact:
        for step in pa["rewrites"]:
            steps[(step["previous"], step["level"])] += sum(g["count"] for g in step["groups"])
    rewrites = "; ".join(f"{k} rewrite{'s' if k != 1 else ''} between {a} and {b}" for (a, b), k in steps.items() if k)
    floats = sum(g["total"] for g in why["groups"])
    lints = Counter((x.get("severity") or "warning") for x in report.get("lints") or [])
    env = report.get("environment") or {}
    layers = report.get("layers") or {}
    return {
        "glance": f"{len(quant)} artifacts: tool, calibration, format, Q/DQ counts, weights, bias, size, kernels, "
                  "coverage, SQNR, cosine, latency, gates",
        "decisions": f"{len(report.get('decisions') or [])} decisions, where each artifact makes them",
        "why_float": f"{floats} nodes in float across {len(why['groups'])} artifacts by blocker; "
                     f"{len(why['advice'])} changes measured and adopted, {len(why['refuted'])} refuted",
        "layers": (f"{len(layers.get('rows') or [])} tensors compared on {layers.get('samples')} samples; "
                   "where SQNR drops, the worst tensors" if layers else "not measured"),
        "levels": f"{len(levels)} levels x {len(names)} artifacts: nodes, Q/DQ, coverage, kernels, SQNR, latency, op histograms",
        "rewrites": rewrites or "no rewrites between levels",
        "files": f"{len(names)} files: producer, opsets, tool settings, quantized tensors (scale, zero point, axis)",
        "agreement": f"{len(report.get('agreement') or [])} rows: each pair of artifacts against each other",
        "platform": f"{len(report.get('platform') or [])} differences from the course chapter's arm64",
        "lints": ", ".join(f"{v} {k}" for k, v in sorted(lints.items())) or "no lints",
        "environment": f"onnxruntime {(env.get('versions') or {}).get('onnxruntime', '?')}, "
                       f"{(env.get('cpu') or {}).get('arch', '?')}; the job took "
                       f"{sum((report.get('timings') or {}).values()):.1f} s by stage",
    }


def _made_up_banner(samples: Any) -> str | None:
    try:
        return made_up_data_banner(SamplesInfo.model_validate(samples)) if samples else None
    except Exception:  # noqa: BLE001 - an older report without samples renders without the banner
        return None


def render_job_page(rec, report, files: list[tuple[str, int]], *, graph_level: str | None = None) -> str:
    ctx: dict[str, Any] = {"job": rec, "created": datetime.fromtimestamp(rec.created_at, tz=timezone.utc)}
    if report is not None:
        data = report.model_dump(mode="json") if hasattr(report, "model_dump") else dict(report)
        ctx.update(build_view(data, files, rec.id, graph_level=graph_level))
        return _env.get_template("report.html").render(**ctx)
    return _env.get_template("job.html").render(**ctx)
