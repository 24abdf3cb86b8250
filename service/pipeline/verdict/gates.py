"""CI gates: thresholds from ``options.gates`` evaluated against a finished report.

A gate reads one number from ``artifacts.<artifact>.optimized.<level>`` and compares it with
a threshold. Missing data is never a crash and never a pass: a path that failed, a level that
was not run, a level without numerics or latency all make the gate fail with a message that
says which piece is missing and why, so a CI log tells the user what to fix.

The text form ``ort_qdq.all.sqnr_db>=25`` is what the CLI takes and what ``GateResult.gate``
shows. The client (``clients/python``) parses its own copy of this syntax because it must not
import ``service``; keep the two in step (``tests/clients`` pins the client's side).

    [artifact.][level.]metric[op value]
    artifact  pt2e_qdq | ort_qdq | ... | a brought file's name | *   (default *: every artifact but fp32)
    level     disable_all | basic | extended | layout | all (default all)
    metric    sqnr_db | cosine | max_abs_error (worst float output SQNR judges) | mismatch_share (worst integer
              output: share of labels, indices or counts that differ from fp32) | angular_error (largest
              mean angular error of a circular output, radians) | argmax_agreement (lowest share of rows whose
              top class is fp32's, over probability outputs) | int8_coverage
              | latency_ratio | status_ok
              | calibration_data_uploaded  (whole report: 1 when the user's .npz was used, 0 when
                samples were generated; lets CI refuse numbers that describe made-up data)
    op        >= > <= < ==                                   (default >=, value default 1)
    value     a number, or baseline[+-number]: the same figure in a baseline report plus an offset,
              e.g. 'ort_qdq.all.sqnr_db>=baseline-0.5', 'pt2e_qdq.all.latency_ratio<=baseline+0.1'

A relative gate compares each artifact with its own baseline figure (``Gate.baseline_values``,
filled by :func:`baseline_values_from_report` from the earlier report) and its result states the
baseline value, the new value and the delta. A baseline without that figure fails the gate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import ValidationError

from service.errors import InvalidOptions, validation_errors
from service.schemas.options import BROUGHT_NAME, BUILTIN_ARTIFACTS, LEVELS, Gate
from service.schemas.report import Artifact, GateResult, Report, SamplesInfo, Verdict

METRICS = ("sqnr_db", "cosine", "max_abs_error", "mismatch_share", "angular_error", "argmax_agreement", "int8_coverage",
           "latency_ratio", "status_ok", "calibration_data_uploaded")
# Gates on a target or platform of options.platforms ("qnn:69.ort_qdq.compiles"): parsed here, evaluated by the
# platforms stage's platforms/targets/gates.py (a later stage: it is handed in as ``platform_gate``).
TARGET_FLAG_METRICS = ("compiles", "same_graphs")
TARGET_METRICS = (*TARGET_FLAG_METRICS, "nodes_taken_share")
_PLATFORM_RE = re.compile(r"^\s*(?P<platform>qnn(?::[0-9]{1,4})?|openvino:cpu|ort:[0-9]+\.[0-9]+\.[0-9]+"
                          r"|arm64(?::[a-z0-9-]+)?)\.(?P<rest>.+)$")


def split_platform(text: str) -> tuple[str | None, str]:
    """``"qnn:69.ort_qdq.compiles"`` -> ``("qnn:69", "ort_qdq.compiles")``; no platform -> ``(None, text)``."""
    m = _PLATFORM_RE.match(text)
    return (m["platform"], m["rest"]) if m else (None, text)


# Metrics that read a yes/no of the whole report or its paths: no threshold needed (default >= 1).
_FLAG_METRICS = ("status_ok", "calibration_data_uploaded", *TARGET_FLAG_METRICS)
# Longest first so ">=" is not read as ">" followed by "=25".
OPS = (">=", "<=", "==", ">", "<")
_NUMERIC_ATTR = {"sqnr_db": "worst_sqnr_db", "cosine": "worst_cosine", "max_abs_error": "worst_max_abs_error",
                 "mismatch_share": "worst_mismatch_share", "angular_error": "worst_angular_error",
                 "argmax_agreement": "worst_argmax_agreement"}
# The figures that judge an output SQNR cannot (OutputNumerics.judged_by): what a gate on SQNR points to.
_FITTING = {"angular_error": "angular_error (e.g. '*.{level}.angular_error<=0.05')",
            "argmax_agreement": "argmax_agreement (e.g. '*.{level}.argmax_agreement>=0.99')",
            "mismatch_share": "mismatch_share (e.g. '*.{level}.mismatch_share<=0.01')"}
_GATE_RE = re.compile(r"^\s*(?P<lhs>[A-Za-z0-9_.*]+)\s*(?:(?P<op>>=|<=|==|>|<)\s*(?P<value>\S+))?\s*$")
_BASELINE_RE = re.compile(r"^baseline(?:(?P<offset>[+-][^+-].*))?$")


_ARTIFACT_NAME = re.compile(BROUGHT_NAME)


def gate_from_string(text: str) -> Gate:
    """``"ort_qdq.all.sqnr_db>=25"`` -> ``Gate(artifact="ort_qdq", level="all", ...)``; with a platform in front
    (``"qnn:69.ort_qdq.compiles"``) the gate reads ``platforms.<platform>``.

    Raises :class:`InvalidOptions` with the accepted syntax in the hint.
    """
    platform, rest = split_platform(text or "")
    if platform:
        return _gate_from_parts(rest, text, platform)
    return _gate_from_parts(text, text, None)


def _gate_from_parts(text: str, whole: str, platform: str | None) -> Gate:
    metrics = (*METRICS, *TARGET_METRICS) if platform else METRICS
    hint = (
        "write gates as [artifact.][level.]metric op value, e.g. 'ort_qdq.all.sqnr_db>=25', "
        "'*.all.int8_coverage>=0.9', '*.all.mismatch_share<=0.01', 'pt2e_qdq.all.latency_ratio<=1.2', 'status_ok' "
        "or 'calibration_data_uploaded'; on a target: 'qnn:69.ort_qdq.compiles', 'ort:1.22.1.same_graphs', "
        "'openvino:cpu.ort_qdq.sqnr_db>=30'"
    )
    m = _GATE_RE.match(text or "")
    if not m:
        raise InvalidOptions(f"gate {whole!r} is not in the gate syntax", hint=hint)
    parts = m["lhs"].split(".")
    metric = parts[-1]
    if metric not in metrics:
        on = " (compiles, same_graphs and nodes_taken_share need a target in front)" if metric in TARGET_METRICS else ""
        raise InvalidOptions(f"gate {whole!r}: unknown metric {metric!r} (one of {', '.join(metrics)}){on}", hint=hint)
    fields: dict[str, Any] = {"metric": metric, "platform": platform}
    for part in parts[:-1]:
        if part in LEVELS:
            key = "level"
        elif part == "*" or _ARTIFACT_NAME.match(part):  # a built-in path or a brought file's name
            key = "artifact"
        else:
            raise InvalidOptions(
                f"gate {whole!r}: {part!r} is neither an artifact ({', '.join(BUILTIN_ARTIFACTS)}, a brought "
                "file's name, *) "
                f"nor a level ({', '.join(LEVELS)})",
                hint=hint,
            )
        if key in fields:
            raise InvalidOptions(f"gate {whole!r}: {key} given twice", hint=hint)
        fields[key] = part
    if metric == "calibration_data_uploaded" and len(parts) > 1:
        raise InvalidOptions(f"gate {whole!r}: calibration_data_uploaded is about the whole report; "
                             "write it without artifact or level", hint=hint)
    if len(parts) == 3 and (parts[0] in LEVELS or parts[1] not in LEVELS):
        raise InvalidOptions(f"gate {whole!r}: write artifact before level", hint=hint)
    if len(parts) > 3:
        raise InvalidOptions(f"gate {whole!r}: too many dotted parts", hint=hint)
    if m["op"]:
        raw = m["value"]
        relative = _BASELINE_RE.match(raw)
        if relative:
            if metric == "status_ok":
                raise InvalidOptions(f"gate {whole!r}: status_ok cannot be relative to a baseline", hint=hint)
            fields["relative_to"] = "baseline"
            raw = relative["offset"] or "0"
        try:
            value = float(raw)
        except ValueError:
            raise InvalidOptions(f"gate {whole!r}: {m['value']!r} is neither a number nor baseline[+-number]",
                                 hint=hint) from None
        if not math.isfinite(value):
            raise InvalidOptions(f"gate {whole!r}: the threshold is not a finite number", hint=hint)
        fields["op"], fields["value"] = m["op"], value
    elif metric not in _FLAG_METRICS:
        raise InvalidOptions(f"gate {text!r}: a threshold is missing (e.g. {text}>=25)", hint=hint)
    try:
        return Gate(**fields)
    except ValidationError as e:  # pragma: no cover - the checks above cover every field
        raise InvalidOptions(f"gate {text!r}: {validation_errors(e)[0]['msg']}", hint=hint) from e


def gate_to_string(gate: Gate) -> str:
    """The inverse of :func:`gate_from_string`; ``status_ok>=1`` reads as ``status_ok``."""
    if gate.platform:
        inner = gate_to_string(gate.model_copy(update={"platform": None}))
        if not gate.platform.startswith(("ort:", "arm64")):  # QNN and OpenVINO compile the file: no level
            inner = inner.replace(f".{gate.level}.", ".", 1)
        return f"{gate.platform}.{inner}"
    if gate.metric in _FLAG_METRICS:
        head = gate.metric if gate.artifact == "*" else f"{gate.artifact}.{gate.metric}"
        return head if (gate.op, gate.value) == (">=", 1.0) else f"{head}{gate.op}{_num(gate.value)}"
    return f"{gate.artifact}.{gate.level}.{gate.metric}{gate.op}{_threshold_text(gate)}"


def _threshold_text(gate: Gate) -> str:
    if gate.relative_to != "baseline":
        return _num(gate.value)
    return "baseline" if gate.value == 0 else f"baseline{gate.value:+.6g}"


def baseline_values_from_report(baseline: Report, gate: Gate) -> dict[str, float | None]:
    """The figures a relative ``gate`` compares with, per artifact, read from an earlier report.

    An artifact whose figure the baseline lacks (failed path, level not run, no latency) is left
    out, so the gate fails for it with a message saying so. ``None`` is an exact match (SQNR).
    """
    names = [a for a in baseline.artifacts if a != "fp32"] if gate.artifact == "*" else [gate.artifact]
    out: dict[str, float | None] = {}
    for name in names:
        value, problem = _value_from_artifact(baseline, name, gate.level, gate.metric)
        if problem is None:
            out[name] = None if value is not None and math.isinf(value) else value
    return out


@dataclass(frozen=True)
class _Results:
    """What the gates read of a report: its artifacts, the options it ran with, how its samples were made."""

    artifacts: dict[str, Artifact]
    options: Any
    samples: SamplesInfo | None = None
    platforms: dict | None = None  # options.platforms' reports, for gates on a target
    platform_gate: Callable | None = None  # (results, gate, label) -> GateResult for a gate on a platform


def verdict_from_artifacts(artifacts: dict[str, Artifact], options: Any, gates: list[Gate], *,
                           samples: SamplesInfo | None = None, platforms: dict | None = None,
                           platform_gate: Callable | None = None) -> Verdict:
    """The verdict before the report exists (the spine builds the report once, verdict included)."""
    return verdict_from_report(_Results(artifacts, options, samples, platforms, platform_gate), gates)


def verdict_from_report(report: Report | _Results, gates: list[Gate]) -> Verdict:
    """Evaluate every gate; ``passed`` is true when all pass (and when there are none)."""
    results = [_result_from_gate(report, g) for g in gates]
    return Verdict(
        passed=all(r.passed for r in results),
        gates=results,
        failures=[f"{r.gate}: {r.message}" for r in results if not r.passed],
    )


def _result_from_gate(report: Report, gate: Gate) -> GateResult:
    label = gate_to_string(gate)
    try:
        if gate.platform:
            read = getattr(report, "platform_gate", None)
            if read is None:
                return GateResult(gate=label, passed=False, message=f"{gate.platform} did not run: add it to "
                                                                    "options.platforms")
            return read(report, gate, label)
        if gate.metric == "status_ok":
            return _status_ok(report, gate, label)
        if gate.metric == "calibration_data_uploaded":
            return _calibration_uploaded(report, gate, label)
        return _metric_gate(report, gate, label)
    except Exception as e:  # a malformed report must fail the gate, not the job
        return GateResult(gate=label, passed=False, actual=None, message=f"could not evaluate: {type(e).__name__}: {e}")


def _requested(report: Report) -> list[str]:
    """Quantized artifacts the user asked for, in the order of ``options.artifacts``."""
    asked = list(getattr(report.options, "artifacts", None) or [])
    extra = [a for a in report.artifacts if a != "fp32" and a not in asked]
    return asked + extra


def _status_ok(report: Report, gate: Gate, label: str) -> GateResult:
    names = _requested(report) if gate.artifact == "*" else [gate.artifact]
    if not names:
        return GateResult(gate=label, passed=False, actual=None, message="no artifact was requested")
    bad: list[str] = []
    for name in names:
        art = report.artifacts.get(name)
        if art is None:
            bad.append(f"{name} missing from the report")
        elif art.status != "ok":
            bad.append(f"{name} {art.status}{_error_suffix(art)}")
    share = (len(names) - len(bad)) / len(names)
    passed = _compare(share, gate.op, gate.value)
    if not bad:
        message = f"all {len(names)} ok ({', '.join(names)})"
    else:
        message = f"{len(names) - len(bad)}/{len(names)} ok; " + "; ".join(bad)
    return GateResult(gate=label, passed=passed, actual=share, message=message)


def _calibration_uploaded(report: Report, gate: Gate, label: str) -> GateResult:
    samples = report.samples
    if samples is None:
        return GateResult(gate=label, passed=False, actual=None, message="the report does not say how its samples were made")
    uploaded = 1.0 if samples.source == "uploaded" else 0.0
    passed = _compare(uploaded, gate.op, gate.value)
    if uploaded:
        message = f"calibration and evaluation used the uploaded .npz ({samples.calibration_count} samples)"
    else:
        made = ", ".join(f"{k}: {v}" for k, v in samples.generators.items()) or "generated"
        message = (f"no .npz was uploaded: samples were generated ({made}); scales and accuracy describe that "
                   "data, not the model's real inputs (upload calibration data to pass)")
    return GateResult(gate=label, passed=passed, actual=uploaded, message=message)


def _metric_gate(report: Report, gate: Gate, label: str) -> GateResult:
    names = _requested(report) if gate.artifact == "*" else [gate.artifact]
    if not names:
        return GateResult(gate=label, passed=False, actual=None, message="no artifact was requested")
    levels_run = list(getattr(report.options, "levels", None) or LEVELS)
    if gate.level not in levels_run:
        return GateResult(
            gate=label, passed=False, actual=None,
            message=f"level {gate.level!r} was not run (options.levels is {levels_run})",
        )
    values: dict[str, float] = {}
    thresholds: dict[str, float] = {}
    bases: dict[str, float] = {}
    problems: list[str] = []
    for name in names:
        value, problem = _value_from_artifact(report, name, gate.level, gate.metric)
        if problem:
            problems.append(f"{name}: {problem}")
            continue
        if gate.relative_to == "baseline":
            known = gate.baseline_values or {}
            if name not in known:
                problems.append(f"{name}: the baseline has no {gate.metric} at level {gate.level!r}, "
                                f"so there is nothing to compare with")
                continue
            base = math.inf if known[name] is None else float(known[name])  # null: an exact match
            bases[name], thresholds[name] = base, base + gate.value
        else:
            thresholds[name] = gate.value
        values[name] = value
    failing = [n for n, v in values.items() if not _compare(v, gate.op, thresholds[n])]
    noise = _latency_noise(report, list(values), gate.level) if gate.metric == "latency_ratio" else []
    # The deciding number is the worst one in the gate's own direction (against a baseline: the
    # worst change, since each artifact has its own baseline figure).
    pool = failing or list(values)
    decider = _decider(pool, values, bases, gate.op) if pool else None
    actual = values[decider] if decider else None
    baseline_json = _json_float(bases[decider]) if decider in bases else None
    delta = _delta(values[decider], bases[decider]) if decider in bases else None
    shown = ", ".join(_shown(n, values, bases) for n in values)
    parts = []
    if failing:
        parts.append(f"{', '.join(_shown(n, values, bases) for n in failing)} not {gate.op} {_threshold_shown(gate, failing, thresholds)}")
    parts.extend(problems)
    fields = dict(gate=label, actual=_json_float(actual), baseline=baseline_json, delta=delta)
    if noise:
        # A latency measured under load is not evidence of a regression (nor of its absence): say so,
        # and let the gate decide by its ``on_noisy`` (default: fail, so CI re-runs rather than trusts it).
        why = "noisy latency (" + "; ".join(noise) + ")"
        if failing and not problems and gate.on_noisy == "pass":
            return GateResult(passed=True, noisy=True, **fields,
                              message=f"{'; '.join(parts)}, but {why}: passed by on_noisy=pass; re-run on an idle machine")
        if parts:
            parts.append(f"{why}: re-run on an idle machine before reading it as a regression")
            return GateResult(passed=False, noisy=True, message="; ".join(parts), **fields)
        return GateResult(passed=True, noisy=True, **fields,
                          message=f"{shown} {gate.op} {_threshold_shown(gate, list(values), thresholds)}; {why}")
    if parts:
        return GateResult(passed=False, message="; ".join(parts), **fields)
    # A pass on the outputs SQNR judges says which outputs it does not cover, so nobody reads it as all of them.
    left = _left_out(report, list(values), gate.level) if gate.metric in ("sqnr_db", "cosine", "max_abs_error") else ""
    return GateResult(passed=True, message=f"{shown} {gate.op} {_threshold_shown(gate, list(values), thresholds)}"
                                           + (f"; not in this figure: {left}" if left else ""), **fields)


def _decider(pool: list[str], values: dict[str, float], bases: dict[str, float], op: str) -> str:
    if bases and all(n in bases for n in pool):
        changes = {n: values[n] - bases[n] if math.isfinite(bases[n]) else (0.0 if values[n] == bases[n] else -math.inf)
                   for n in pool}
        return _worst_key(changes, op)
    return _worst_key({n: values[n] for n in pool}, op)


def _worst_key(values: dict[str, float], op: str) -> str:
    worst = _worst(list(values.values()), op)
    return next(n for n, v in values.items() if v == worst or (math.isnan(v) and math.isnan(worst)))


def _delta(value: float, base: float) -> float | None:
    d = value - base
    return d if math.isfinite(d) else (0.0 if value == base else None)


def _json_float(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else v


def _shown(name: str, values: dict[str, float], bases: dict[str, float]) -> str:
    text = f"{name}={_num(values[name])}"
    if name in bases:
        delta = _delta(values[name], bases[name])
        text += f" (baseline {_num(bases[name])}, delta {'n/a' if delta is None else f'{delta:+.4g}'})"
    return text


def _threshold_shown(gate: Gate, names: list[str], thresholds: dict[str, float]) -> str:
    if gate.relative_to != "baseline":
        return _num(gate.value)
    numbers = sorted({_num(thresholds[n]) for n in names})
    return f"{_threshold_text(gate)} ({', '.join(numbers)})"


def _latency_noise(report: Report, names: list[str], level: str) -> list[str]:
    """'<artifact>: <reasons>' for each latency the gate read (fp32's included) that is marked noisy."""
    out = []
    for name in ["fp32", *names]:
        art = report.artifacts.get(name)
        opt = art.optimized.get(level) if art is not None else None
        lat = getattr(opt, "latency", None) if opt is not None else None
        if lat is not None and getattr(lat, "noisy", False):
            out.append(f"{name}: {', '.join(lat.noisy_reasons) or 'noisy'}")
    return out


def _value_from_artifact(report: Report, name: str, level: str, metric: str) -> tuple[float | None, str | None]:
    art = report.artifacts.get(name)
    if art is None:
        return None, "not in the report (was it requested in options.artifacts?)"
    if art.status != "ok":
        return None, f"path {art.status}{_error_suffix(art)}"
    opt = art.optimized.get(level)
    if opt is None:
        return None, f"no optimized graph at level {level!r}"
    level_error = getattr(opt, "error", None)
    if metric in _NUMERIC_ATTR:
        numerics = getattr(opt, "numerics", None)
        if numerics is None:
            why = f": {level_error}" if level_error else ""
            return None, f"no numerics at level {level!r}{why}"
        if metric in ("mismatch_share", "angular_error", "argmax_agreement"):
            value = getattr(numerics, _NUMERIC_ATTR[metric], None)
            if value is None:
                return None, f"no output has {metric} at level {level!r}: {_kinds(numerics, level) or 'none'}"
            return _finite_or_problem(float(value), metric)
        if numerics.elementwise_outputs == 0 and numerics.outputs:
            return None, (f"no output is judged by {metric} at level {level!r}, so this file's accuracy is not in "
                          f"this figure: {_kinds(numerics, level)}")
        nonfinite = sum(o.nonfinite for o in numerics.outputs)
        if nonfinite and metric == "max_abs_error":
            # the recorded figure covers the finite positions only (SQNR and cosine carry the floor)
            return None, f"{nonfinite} output values are inf or NaN where fp32 has numbers at level {level!r}"
        value = getattr(numerics, _NUMERIC_ATTR[metric], None)
        if value is None and metric == "sqnr_db":
            return math.inf, None  # the levels stage writes null when the error is exactly zero
        if value is None:
            return None, f"{metric} not recorded at level {level!r}"
        return _finite_or_problem(float(value), metric)
    if metric == "int8_coverage":
        value = getattr(opt, "int8_coverage", None)
        if value is None:
            return None, f"int8_coverage not recorded at level {level!r}"
        return _finite_or_problem(float(value), metric)
    if metric == "latency_ratio":
        median = _median_ms(opt)
        if median is None:
            not_timed = (getattr(opt, "not_measured", None) or {}).get("latency")  # names the option that times it
            why = f": {level_error}" if level_error else f" ({not_timed})" if not_timed else \
                " (is options.latency.enabled true?)"
            return None, f"no latency at level {level!r}{why}"
        fp32 = report.artifacts.get("fp32")
        if fp32 is None or fp32.status != "ok":
            return None, "no fp32 baseline to compare latency with"
        base = _median_ms(fp32.optimized.get(level))
        if base is None:
            return None, f"no fp32 latency at level {level!r}"
        if base <= 0:
            return None, f"fp32 median latency at level {level!r} is {base} ms"
        return _finite_or_problem(median / base, metric)
    return None, f"unknown metric {metric!r}"  # pragma: no cover - Gate's Literal refuses it


def _left_out(report, names: list[str], level: str) -> str:
    """'<artifact>: <output> ...' for the outputs of ``names`` at ``level`` that SQNR does not judge."""
    out = []
    for name in names:
        numerics = getattr(report.artifacts[name].optimized.get(level), "numerics", None)
        if numerics is not None and any(o.judged_by != "sqnr" for o in numerics.outputs):
            out.append(f"{name}: " + _kinds(numerics, level, skip_sqnr=True))
    return "; ".join(out)


def _kinds(numerics, level: str, *, skip_sqnr: bool = False) -> str:
    """What judges each output (or why nothing does), for a gate whose figure does not cover it."""
    parts = []
    for o in numerics.outputs:
        if o.judged_by is None:
            parts.append(f"{o.name!r} not measured ({o.not_measured})")
        elif o.judged_by == "sqnr":
            if not skip_sqnr:
                parts.append(f"{o.name!r} by sqnr_db")
        else:
            what = {"mismatch_share": "holds integers, bools or strings (labels, indices)", "angular_error":
                    f"is circular ({o.kind_detail})", "argmax_agreement": f"is saturated ({o.kind_detail})"}[o.judged_by]
            parts.append(f"{o.name!r} {what}: gate on {_FITTING[o.judged_by].format(level=level)}")
    return "; ".join(parts)


def _finite_or_problem(value: float, metric: str) -> tuple[float | None, str | None]:
    if math.isnan(value):
        return None, f"{metric} is NaN"
    return value, None


def _median_ms(opt: Any) -> float | None:
    latency = getattr(opt, "latency", None) if opt is not None else None
    value = getattr(latency, "median_ms", None) if latency is not None else None
    return None if value is None else float(value)


def _error_suffix(art: Artifact) -> str:
    if art.error is None:
        return ""
    return f" at {art.error.stage}: {art.error.message}"


def _compare(actual: float, op: str, value: float) -> bool:
    if math.isnan(actual):
        return False
    return {
        ">=": actual >= value, ">": actual > value, "<=": actual <= value, "<": actual < value, "==": actual == value,
    }[op]


def _worst(values: list[float], op: str) -> float:
    if op in (">=", ">"):
        return min(values)
    if op in ("<=", "<"):
        return max(values)
    return values[0]


def _num(v: float) -> str:
    return f"{v:.6g}"
