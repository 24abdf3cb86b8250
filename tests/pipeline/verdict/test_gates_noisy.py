"""A latency gate tells a noisy figure from a real regression."""

from __future__ import annotations

from service.pipeline.verdict.gates import gate_from_string, verdict_from_report
from service.schemas.options import Gate


def _with_latency(report, artifact: str, level: str, **update):
    art = report.artifacts[artifact]
    ol = art.optimized[level]
    ol = ol.model_copy(update={"latency": ol.latency.model_copy(update=update)})
    art = art.model_copy(update={"optimized": {**art.optimized, level: ol}})
    return report.model_copy(update={"artifacts": {**report.artifacts, artifact: art}})


def test_latency_gates_say_noisy_and_on_noisy_decides(compared):
    report, _ = compared("conv_relu", latency={"runs": 3, "min_runs": 3})
    base = report.artifacts["fp32"].optimized["all"].latency.median_ms
    # A 3x slower ort_qdq, measured on a quiet machine: a regression.
    slow = _with_latency(report, "ort_qdq", "all", median_ms=3 * base, noisy=False, noisy_reasons=[])
    slow = _with_latency(slow, "fp32", "all", noisy=False, noisy_reasons=[])
    gate = gate_from_string("ort_qdq.all.latency_ratio<=1.5")
    quiet = verdict_from_report(slow, [gate]).gates[0]
    assert not quiet.passed and not quiet.noisy and "noisy" not in quiet.message
    # The same figure measured under load: still failing by default, but it says why it may not be real.
    loaded = _with_latency(slow, "ort_qdq", "all", noisy=True, noisy_reasons=["load average 5.10 on 2 cores"])
    noisy = verdict_from_report(loaded, [gate]).gates[0]
    assert not noisy.passed and noisy.noisy
    assert "noisy latency (ort_qdq: load average 5.10 on 2 cores)" in noisy.message
    assert "re-run on an idle machine" in noisy.message
    # on_noisy=pass: a noisy failure passes, with the reason; a quiet failure still fails.
    lenient = Gate(**{**gate.model_dump(), "on_noisy": "pass"})
    assert verdict_from_report(loaded, [lenient]).gates[0].passed
    assert not verdict_from_report(slow, [lenient]).gates[0].passed


def test_a_noisy_latency_is_marked_on_the_page_and_in_the_cli(compared):
    from service.render.levels_text import levels_summary_lines
    from service.render.page import _env, build_view

    report, _ = compared("conv_relu", latency={"runs": 3, "min_runs": 3})
    # the headline the job stored read the latencies as they were measured: these reports change them, so the
    # page makes it again from what they say
    quiet = report.model_copy(update={"headline": None})
    for art, a in report.artifacts.items():  # whatever the machine's load was while the fixture ran
        for lv, ol in a.optimized.items():
            if ol.latency is not None:
                quiet = _with_latency(quiet, art, lv, noisy=False, noisy_reasons=[])
    measured = next(lv for lv, ol in report.artifacts["ort_qdq"].optimized.items()
                    if ol.latency is not None and not ol.latency.timed_with)
    noisy = _with_latency(quiet, "ort_qdq", measured, noisy=True, noisy_reasons=["3 jobs running at once on 2 cores"])
    text = "\n".join(levels_summary_lines(noisy))
    assert "~ noisy latency" in text and "3 jobs running at once on 2 cores" in text
    assert "~" not in "\n".join(levels_summary_lines(quiet))

    def page(r):
        return _env.get_template("report.html").render(job=None, created=None,
                                                       **build_view(r.model_dump(mode="json"), [], "job"))

    html = page(noisy)
    assert 'class="noisy"' in html and "3 jobs running at once on 2 cores" in html
    assert "Latency protocol: timed alone after the accuracy runs" in html
    assert 'class="noisy"' not in page(quiet)
