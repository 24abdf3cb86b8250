"""The client shows the server's headline (report["headline"]) first in ``_repr_html_``: one card per artifact, the
chosen one marked, every text escaped; a report without one (partial, older server) renders as before."""

from __future__ import annotations

from quantcompare_client import Report

HEADLINE = {
    "level": "all", "choice": "ort_qdq", "rule": "the fastest file that passes its gates ...",
    "sentence": "Ship ort_qdq: 26.4 dB worst SQNR, 0.83x fp32's time at all; the fastest that passes.",
    "cards": [
        {"artifact": "ort_qdq", "status": "ok", "gates": "passed", "worst_sqnr_db": 26.4, "latency_ratio": 0.83,
         "int8_coverage": 0.96, "float_nodes": 2, "top_blocker": "no_qdq_rule", "top_blocker_count": 2,
         "fix": {"change": "ort.activation_type=\"uint8\""}, "chosen": True, "verdict": "picked: the fastest that passes"},
        {"artifact": "pt2e_qdq", "status": "ok", "gates": "none", "worst_sqnr_db": 20.1, "latency_ratio": 0.80,
         "int8_coverage": 0.9, "float_nodes": 5, "chosen": False, "verdict": "0.80x vs 0.83x, but 6.3 dB less accurate"},
        {"artifact": "<b>user</b>", "status": "failed", "error": "quantize: <script>", "gates": "none", "chosen": False,
         "verdict": "failed"},
    ],
}


def test_repr_html_starts_with_the_headline_cards():
    html = Report({"artifacts": {}, "headline": HEADLINE})._repr_html_()
    assert html.count('class="qc-card"') == 3
    assert html.index("Ship ort_qdq") < html.index("qc-card")
    assert "ship this" in html and "26.4 dB" in html and "0.83× fp32" in html and "no_qdq_rule ×2" in html
    assert "<script>" not in html and "&lt;b&gt;user&lt;/b&gt;" in html


def test_a_report_without_a_headline_renders_without_cards():
    report = Report({"artifacts": {}})
    assert report.headline is None and "qc-card" not in report._repr_html_()
