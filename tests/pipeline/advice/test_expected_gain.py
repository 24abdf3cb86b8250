"""Advice reads the profile (issue 51): a candidate's expected gain is the time its nodes take."""

from __future__ import annotations

from service.pipeline.advice.advice import Candidate, by_expected_gain
from service.pipeline.advice.expected_gain import expected_gain_ms
from service.schemas.levels import OpProfile, ProfiledNode


def _profile(**kw) -> OpProfile:
    base = dict(total_ms=10.0, kernels_ms=10.0, by_op_type={"Conv": 6.0, "QLinearConv": 4.0},
                by_class={"float kernels": 6.0, "int8 kernels": 4.0}, op_counts={"Conv": 4, "QLinearConv": 2},
                top_nodes=[ProfiledNode(node="stem", op_type="Conv", ms=4.5, share=0.45, kernel="f32")],
                by_kernel={"f32": 6.0, "s8s8": 4.0})
    return OpProfile(**{**base, **kw})


def test_the_time_of_the_nodes_not_their_count_orders_the_candidates():
    """One blocked stem Conv (4.5 ms) outweighs three blocked 1x1 Convs (0.5 ms each, the mean of the others)."""
    one_slow = Candidate("ort_qdq", {"session": {"session.qdqisint8allowed": "1"}}, "slow", blocked=("stem",))
    three_fast = Candidate("pt2e_qdq", {"session": {"session.qdqisint8allowed": "1"}}, "fast", blocked=("a", "b", "c"))
    profiles = {"ort_qdq": _profile(), "pt2e_qdq": _profile(top_nodes=[])}
    assert expected_gain_ms(one_slow, profiles["ort_qdq"]) == 4.5
    assert expected_gain_ms(three_fast, profiles["pt2e_qdq"]) == 4.5  # 3 x 6 ms / 4 float Convs
    profiles["pt2e_qdq"] = _profile(top_nodes=[], by_class={"float kernels": 2.0}, op_counts={"Conv": 4})
    assert by_expected_gain([three_fast, one_slow], {}, profiles) == [one_slow, three_fast]
    # without profiles, the count decides, as before
    assert by_expected_gain([one_slow, three_fast], {}) == [three_fast, one_slow]


def test_uint8_activations_count_the_s8s8_kernels_time_and_accuracy_counts_none():
    uint8 = Candidate("ort_qoperator", {"ort": {"activation_type": "uint8"}}, "s8s8")
    assert expected_gain_ms(uint8, _profile()) == 4.0
    assert expected_gain_ms(uint8, _profile(by_kernel={"u8s8": 4.0})) == 0.0
    assert expected_gain_ms(Candidate("ort_qdq", {"ort": {"nodes_to_exclude": ["stem"]}}, "err", kind="accuracy",
                                      blocked=("stem",)), _profile()) == 0.0
    assert expected_gain_ms(uint8, None) is None
