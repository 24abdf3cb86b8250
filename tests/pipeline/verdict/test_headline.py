"""The headline's "which file" rule (pipeline/verdict/headline.py: which_file), case by case, and the cards it reads from a
report. Pure: plain dicts and cards, no toolchain."""

from __future__ import annotations

import math

import pytest

from service.pipeline.verdict.headline import RULE, deployed_level, headline_from_report, which_file
from service.schemas.headline import HeadlineCard


def card(name, sqnr=30.0, ratio=0.8, *, status="ok", gates="none", accuracy="measured", exact=False):
    return HeadlineCard(artifact=name, status=status, gates=gates, worst_sqnr_db=sqnr, latency_ratio=ratio,
                        accuracy=accuracy, exact=exact)


@pytest.mark.parametrize("cards, expected", [
    # the detector: pt2e 20.1 dB at 0.80x, ort_qdq 26.4 dB at 0.83x (within 10%, 6 dB better), QOperator 3.25x
    ([card("pt2e_qdq", 20.1, 0.80), card("ort_qdq", 26.4, 0.83), card("ort_qoperator", 24.5, 3.25)], "ort_qdq"),
    # within 10% but under 1 dB better: the fastest stays
    ([card("a", 30.0, 0.50), card("b", 30.9, 0.54)], "a"),
    # more accurate but more than 10% slower: the fastest
    ([card("a", 20.0, 0.50), card("b", 40.0, 0.60)], "a"),
    # none faster than fp32: the most accurate, whatever its time
    ([card("a", 30.0, 1.2), card("b", 35.0, 3.0)], "b"),
    # no latency measured: the most accurate
    ([card("a", 30.0, None), card("b", 35.0, None)], "b"),
    # a failed gate, a failed path, an unmeasured accuracy take a file out
    ([card("a", 40.0, 0.5, gates="failed"), card("b", 30.0, 0.9)], "b"),
    ([card("a", None, None, status="failed"), card("b", 30.0, 1.5)], "b"),
    ([card("a", None, 0.5, accuracy="not measured"), card("b", 30.0, 0.9)], "b"),
    # exact (no error at all) beats any SQNR
    ([card("a", 60.0, 1.1), card("b", None, 1.2, exact=True)], "b"),
    # six artifacts (issue 50's quantizers and a user's file): one rule
    ([card("pt2e_qdq", 25, 0.9), card("ort_qdq", 26, 0.7), card("ort_qoperator", 27, 3.0), card("nncf_qdq", 31, 0.75),
      card("modelopt_qdq", 33, 0.95), card("user", 50, 0.72, gates="failed")], "nncf_qdq"),
])
def test_which_file(cards, expected):
    assert which_file(cards)[0] == expected


def test_no_file_qualifies():
    assert which_file([card("a", status="failed"), card("b", gates="failed")]) == (None, "no file qualifies")


def _level(sqnr, ms, *, unfused=(), coverage=1.0):
    return {"numerics": {"worst_sqnr_db": sqnr, "elementwise_outputs": 1, "accuracy": "measured"},
            "latency": {"median_ms": ms}, "int8_coverage": coverage, "node_count": 3,
            "unfused": [{"node": f"n{i}", "op_type": "Mul", "blocker": b, "detail": "", "fix": f"fix {b}"}
                        for i, b in enumerate(unfused)]}


def _report(**arts):
    return {"artifacts": {"fp32": {"status": "ok", "optimized": {"basic": _level(None, 1.0), "all": _level(None, 1.0)}},
                          **{n: {"status": "ok", "optimized": {"basic": _level(*a), "all": _level(*a)}}
                             for n, a in arts.items()}}}


def test_the_headline_reads_the_deployed_level_and_names_the_top_blocker_and_its_measured_fix():
    r = _report(pt2e_qdq=(20.1, 0.80), ort_qdq=(26.4, 0.83), ort_qoperator=(24.5, 3.25))
    r["artifacts"]["ort_qdq"]["optimized"]["all"]["unfused"] = _level(0, 0, unfused=("no_qdq_rule", "io_dtype_mismatch",
                                                                                      "io_dtype_mismatch"))["unfused"]
    r["advice"] = [{"artifact": "ort_qdq", "change": {"ort": {"activation_type": "uint8"}}, "reason": "",
                    "measured": {"before": {"sqnr_db": 26.4, "latency_ms": 0.83}, "after": {"sqnr_db": 26.0, "latency_ms": 0.4}},
                    "recipe": {"call": "quantize_static(...)"}}]
    r["verdict"] = {"passed": False, "gates": [{"gate": "ort_qoperator.all.latency_ratio<=1", "passed": False,
                                                "message": "3.25 > 1"}]}
    h = headline_from_report(r)
    assert deployed_level(r) == h.level == "all"
    assert h.choice == "ort_qdq" and h.rule == RULE
    assert [c.artifact for c in h.cards] == ["ort_qdq", "pt2e_qdq", "ort_qoperator"]  # the chosen first
    qdq = h.cards[0]
    assert qdq.chosen and qdq.float_nodes == 3 and (qdq.top_blocker, qdq.top_blocker_count) == ("io_dtype_mismatch", 2)
    assert qdq.top_blocker_fix == "fix io_dtype_mismatch"
    assert qdq.fix.change == 'ort.activation_type="uint8"' and qdq.fix.recipe == {"call": "quantize_static(...)"}
    assert math.isclose(qdq.latency_ratio, 0.83)
    assert "Ship ort_qdq: 26.4 dB" in h.sentence and "0.83x" in h.sentence
    assert "Measured: ort_qdq with ort.activation_type=\"uint8\" runs at 0.40x" in h.sentence  # what to change
    pt2e, qop = h.cards[1], h.cards[2]
    assert "6.3 dB less accurate" in pt2e.verdict
    assert qop.gates == "failed" and "fails ort_qoperator.all.latency_ratio<=1" in qop.verdict


def test_a_failed_path_gets_a_card_and_the_sentence_says_when_none_qualifies():
    r = _report(ort_qdq=(30.0, 0.9))
    r["artifacts"]["pt2e_qdq"] = {"status": "failed", "error": {"stage": "quantize", "message": "export failed"}}
    r["artifacts"]["ort_qdq"]["optimized"]["all"]["numerics"]["accuracy"] = "not measured"
    h = headline_from_report(r)
    assert h.choice is None and h.sentence.startswith("No file qualifies")
    failed = next(c for c in h.cards if c.artifact == "pt2e_qdq")
    assert failed.error == "quantize: export failed" and failed.verdict.startswith("failed")


def test_an_older_report_without_levels_still_has_a_headline():
    h = headline_from_report({"artifacts": {"fp32": {"status": "ok"}, "ort_qdq": {"status": "ok"}}})
    assert h.level is None and h.choice is None and len(h.cards) == 1
