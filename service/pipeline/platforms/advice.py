"""Advice for an emulated platform: the candidates (the quantized artifacts) judged on the graphs the
platform's ORT saved and the accuracy measured there, never on speed, and the advice says so. The
measured re-runs of ``advice/advice.py`` (changes to a file, timed) run on this machine only."""

from __future__ import annotations

from service.schemas.platforms import PlatformAdvice, PlatformReport

__all__ = ["SQNR_TIE_DB", "advice_for_platform"]

# Within this many dB of the best SQNR, two candidates count as equally accurate; int8 coverage decides.
SQNR_TIE_DB = 1.0


def advice_for_platform(report: PlatformReport) -> PlatformAdvice | None:
    if report.status != "ok":
        return None
    rows = []
    for artifact, per_level in report.optimized.items():
        if artifact == "fp32":
            continue
        ol = next((per_level[lv] for lv in reversed(list(per_level)) if not per_level[lv].error), None)
        if ol is None:
            continue
        rows.append((artifact, ol.level, ol.int8_coverage, ol.numerics.worst_sqnr_db if ol.numerics else None))
    measured = [r for r in rows if r[3] is not None]
    best = None
    if measured:
        top = max(r[3] for r in measured)
        best = max((r for r in measured if r[3] >= top - SQNR_TIE_DB), key=lambda r: (r[2] or 0.0, r[3]))
    samples = report.accuracy.samples_run if report.accuracy else 0
    return PlatformAdvice(
        judged_on="graphs and accuracy only: latency is not measured under emulation, and the measured re-runs "
                  "of the advice section ran on this machine, not on " + report.name,
        candidates=[f"{a} at {lv}: int8 coverage {'-' if c is None else f'{c:.2f}'}, worst SQNR "
                    f"{'-' if s is None else f'{s:.1f} dB'} on {samples} sample(s)" for a, lv, c, s in rows],
        choice=(f"{best[0]} at {best[1]}: highest int8 coverage among the candidates within {SQNR_TIE_DB:.0f} dB of "
                f"the best SQNR on {report.name}") if best else None)
