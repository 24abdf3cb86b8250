"""The one-screen text summary of a report, for the CLI (and logs)."""

from __future__ import annotations

from service.pipeline.verdict.made_up_data import made_up_data_banner
from service.pipeline.verdict.headline import headline_from_report
from service.render.profile_view import profile_lines
from service.render.levels_text import levels_summary_lines
from service.render.platforms_text import platforms_lines
from service.render.units import human_size
from service.render.why_float import why_float_lines
from service.schemas.headline import Headline, HeadlineCard
from service.schemas.report import Report


def _ops(counts: dict[str, int], limit: int = 6) -> str:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in items[:limit])
    return text + (f", +{len(items) - limit}" if len(items) > limit else "") if text else "-"


def terminal_safe(text: str) -> str:
    """``text`` with every control character but the line break shown as '?': names come from the
    upload, and an input named 'x\\x1b[31m' would otherwise drive the reader's terminal."""
    return "".join(ch if ch == "\n" or ch.isprintable() else "?" for ch in text)


# The headline (pipeline/verdict/headline.py) as the first lines of the summary: the answer, then one line per card.
def _card_line(c: HeadlineCard) -> str:
    mark = "*" if c.chosen else " "
    if c.status != "ok":
        return f" {mark} {c.artifact:<14}{c.status}: {(c.error or '')[:90]}"
    sqnr = "exact" if c.exact else (f"{c.worst_sqnr_db:.1f} dB" if c.worst_sqnr_db is not None else (c.accuracy or "-"))
    ratio = f"{c.latency_ratio:.2f}x fp32" if c.latency_ratio is not None else "latency -"
    cov = f"int8 {100 * c.int8_coverage:.0f}%" if c.int8_coverage is not None else "int8 -"
    floats = f"float {c.float_nodes}" + (f" ({c.top_blocker})" if c.top_blocker else "")
    gates = "" if c.gates == "none" else f"gates {c.gates}; "
    return f" {mark} {c.artifact:<14}{sqnr:>9}  {ratio:<12}{cov:<10}{floats:<28} {gates}{c.verdict}"


def headline_lines(headline: Headline | None) -> list[str]:
    """The sentence (its rule: docs/report.md, "which file"), then one line per card; advice's measured fixes follow
    further down, and the sentence names the one that beats the chosen file."""
    if headline is None:
        return []
    return [headline.sentence] + [_card_line(c) for c in headline.cards]


def summary_table(report: Report) -> str:
    m = report.model
    lines = [
        f"model {m.name} ({m.format}, {m.node_count} nodes, sha256 {m.sha256[:12]})  "
        f"inputs: " + ", ".join(f"{k}{v}" for k, v in m.resolved_input_shapes.items()),
        f"samples: {report.samples.calibration_count} calibration / {report.samples.eval_count} evaluation "
        f"({report.samples.source}{'' if report.samples.eval_held_out else '; evaluation reuses calibration samples, none held out'}); "
        f"{report.environment.cpu.arch}, onnxruntime {report.environment.versions.get('onnxruntime')}",
    ]
    if m.notes:
        lines += [f"note: {n}" for n in m.notes]
    banner = made_up_data_banner(report.samples)
    if banner:
        lines += ["", "!! " + banner + " (upload an .npz; CI: gate calibration_data_uploaded)"]
    # The answer first: the same cards and rule as the page (pipeline/verdict/headline.py); a partial report has none yet.
    headline = report.headline or (None if report.partial else
                                   headline_from_report(report.model_dump(mode="json"), made_up_data=banner))
    if headline is not None:  # right under the made-up-data line, which qualifies it
        lines += ([] if banner else [""]) + headline_lines(headline)
    lines += [
        "",
        f"{'artifact':<14}{'status':<9}{'Q/DQ':>8}  {'bias':<8}{'weights':<10}{'size':>9}  quantized ops (int8 kernels in file)",
    ]
    for name, art in report.artifacts.items():
        q = art.quantization
        size = human_size(art.file.size if art.file else None, missing="-")
        if art.status != "ok":
            lines.append(f"{name:<14}{art.status:<9}{'':>8}  {'':<8}{'':<10}{size:>9}  "
                         f"{art.error.stage}: {art.error.message[:70] if art.error else ''}")
            continue
        if q is None or q.format == "float":
            what = "(float reference)" if name == "fp32" else "(nothing quantized: the float model; see the lints)"
            lines.append(f"{name:<14}{'ok':<9}{'-':>8}  {'-':<8}{'-':<10}{size:>9}  {what}")
            continue
        weights = {"quantized_initializer": "int8", "float_initializer_plus_quantize": "fp32+Q"}.get(q.weights, q.weights)
        ops = _ops(q.ops_quantized)
        if q.int8_kernels_in_file:
            ops += f" ({_ops(q.int8_kernels_in_file, 4)})"
        lines.append(f"{name:<14}{'ok':<9}{f'{q.quantize_linear}/{q.dequantize_linear}':>8}  {q.bias_summary:<8}"
                     f"{weights:<10}{size:>9}  {ops}")
    # The row cuts the message at 70 characters, before the node it names; without these lines the
    # summary of a failed path read "failed in onnxruntime.quantization base_q" and gave no way out.
    for name, art in report.artifacts.items():
        if art.status != "ok" and art.error is not None:
            lines.append(f"  {name} {art.status}: {art.error.message}")
            if art.error.hint:
                lines.append(f"    hint: {art.error.hint}")
    # An ok path whose figures leave outputs unmeasured, or judge them by another figure than SQNR, says so
    # under the table: "ok" must not read as "accurate" when nothing measured it.
    for name, art in report.artifacts.items():
        if art.accuracy not in (None, "measured"):
            lines.append(f"  {name} ok, accuracy {art.accuracy}: {art.accuracy_note}")
        numerics = next((ol.numerics for ol in reversed(list(art.optimized.values())) if ol.numerics), None)
        for o in (numerics.outputs if numerics and name != "fp32" else []):
            if o.judged_by == "angular_error":
                lines.append(f"  {name} output {o.name!r} circular: angular error max {o.angular_error_max:.4f} rad, "
                             f"mean {o.angular_error_mean:.4f} rad (SQNR {o.sqnr_db if o.sqnr_db is None else round(o.sqnr_db, 1)} dB "
                             "counts in no worst figure)")
            elif o.judged_by == "argmax_agreement":
                lines.append(f"  {name} output {o.name!r} saturated classifier: argmax agreement {o.argmax_agreement:.1%}")
    extra = levels_summary_lines(report)
    if extra:
        lines += [""] + list(extra)
    lines += profile_lines(report)
    lines += why_float_lines(report)
    if report.platform:
        # The topics on one line; the report (report.json 'platform') and the page carry each note's text
        # and evidence.
        lines += ["", f"this machine ({report.environment.cpu.arch}) differs from the chapter (arm64) in: "
                      + "; ".join(p.topic for p in report.platform) + " (report.json 'platform')"]
    lines += platforms_lines(report)
    if report.layers is not None and report.layers.rows:
        layers = report.layers
        sampling = layers.sampling
        stopped = "" if sampling is None else f": {sampling.stopped}" + (
            "" if sampling.widest_db is None else f", widest interval {sampling.widest_db:.1f} dB")
        lines += ["", f"per-tensor error ({len(layers.rows)} tensors at disable_all, {layers.samples} samples{stopped}; "
                      f"95% intervals; report.json 'layers'):"]
        for art, tensor in layers.worst.items():
            row = next(r for r in layers.rows if r.tensor == tensor)
            worst = layers.worst_detail.get(art)
            top = next((o for o in layers.origins if o.artifact == art), None)
            lines.append(f"  {art:<14}worst {tensor} ({row.op_type}) "
                         + (worst.summary if worst else f"{row.artifacts[art].sqnr_db:.1f} dB"))
            if top:
                lines.append(f"  {'':<14}{top.summary}")
    retry = report.layers.retry if report.layers is not None else None
    if retry is not None and (retry.artifacts or retry.skipped):
        lines += ["", f"exclude and retry (the {retry.k} worst origin node(s) left in float; report.json 'layers.retry'):"]
        for r in retry.artifacts:
            if r.error:
                lines.append(f"  {r.artifact:<14}failed: {r.error}")
                continue
            db = lambda v: "exact" if v is None else f"{v:.1f} dB"  # noqa: E731
            ms = (f", {r.latency_ms_before:.3g} -> {r.latency_ms_after:.3g} ms at all"
                  if r.latency_ms_before and r.latency_ms_after else "")
            lines.append(f"  {r.artifact:<14}{', '.join(r.excluded_nodes)}: {db(r.sqnr_db_before)} -> "
                         f"{db(r.sqnr_db_after)}{ms}")
        lines += [f"  not run: {s}" for s in retry.skipped]
    v = report.verdict
    if report.options.gates and v is not None:
        lines += ["", f"verdict: {'PASSED' if v.passed else 'FAILED'}"]
        lines += [f"  {'ok  ' if g.passed else 'FAIL'} {g.gate}: {g.message}" for g in v.gates]
    if report.not_measured:
        lines += ["", f"not measured (depth {report.options.depth}):"]
        lines += [f"  {n.what}: set {n.option}" for n in report.not_measured]
    if report.partial:
        lines += ["", f"(partial: {', '.join(report.sections_done)} done; the rest follows)"]
        return "\n".join(lines)
    lines.append("")
    if report.job_cores is not None:
        lines.append(f"accuracy on {report.job_cores.cores} core(s) ({report.job_cores.source})")
    extras = report.extras
    if extras is not None:
        budget = "no budget" if extras.budget_seconds is None else f"{extras.budget_seconds:.1f} s"
        # One line: what the budget reached, and for what it did not, the option that reaches it.
        lines.append(f"extras ({budget}: {extras.how}; {extras.spent_seconds:.1f} s spent): " + "; ".join(
            s.step + ("" if s.reached else f" not reached ({s.detail})") for s in extras.steps))
    lines.append("timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items()))
    cost = report.cost
    if cost is not None and cost.inference_times:
        lines.append(f"cost: {cost.job_seconds:.1f} s = {cost.inference_times:.0f} fp32 inferences of "
                     f"{cost.fp32_inference_ms:.3g} ms; evaluate by level: "
                     + ", ".join(f"{k} {v:.1f}s" for k, v in cost.evaluate_by_level.items()))
    lines += [f"  cheaper: {h}" for h in (cost.hints if cost is not None else [])]
    return "\n".join(lines)
