"""``options.baseline``: the API turns an earlier comparison's id into the figures a relative gate reads.

Jobs are fault_jobs commands (no toolchain); the "ok" job writes a report without artifacts, so a
baseline taken from it has no figures, which the gate must learn rather than guess.
"""

from __future__ import annotations

import json

import pytest
from test_http_api import assert_problem, upload

RELATIVE = {"artifact": "ort_qdq", "level": "all", "metric": "sqnr_db", "op": ">=", "value": -0.5,
            "relative_to": "baseline"}


def test_a_succeeded_comparison_resolves_into_the_gates_baseline_values(client):
    # Bytes of its own ("ok\t"): test_http_api expects a fresh job for "ok" on the same server.
    base = upload(client, "ok\t", wait=30).json()
    assert base["status"] == "succeeded"
    r = upload(client, "ok  ", {"gates": [RELATIVE], "baseline": base["id"]}, wait=30)
    assert r.status_code == 200, r.text
    gate = r.json()["report"]["options"]["gates"][0]
    assert gate["relative_to"] == "baseline" and gate["baseline_values"] == {}  # that report has no ort_qdq


@pytest.mark.parametrize("command, state", [("sleep 3", "queued|running"), ("user_error", "failed")],
                         ids=["a comparison still running", "a comparison that failed"])
def test_a_baseline_that_did_not_succeed_is_refused_with_its_state(client, command, state):
    base = upload(client, command, wait=30 if command == "user_error" else 0).json()
    body = assert_problem(upload(client, "ok", {"gates": [RELATIVE], "baseline": base["id"]}), 422, "invalid_options")
    assert any(f"is {s}, not succeeded" in body["detail"] for s in state.split("|")), body
    assert body["hint"]


@pytest.mark.parametrize("options, words", [
    ({"gates": [RELATIVE], "baseline": "f" * 32}, "no comparison with id"),
    ({"gates": [RELATIVE], "baseline": "../etc"}, "baseline"),
    ({"gates": [RELATIVE]}, "needs one: set options.baseline"),
    ({"gates": [{**RELATIVE, "metric": "status_ok"}], "baseline": "f" * 32}, "status_ok cannot be relative"),
], ids=["an unknown id", "not an id", "no baseline at all", "status_ok against a baseline"])
def test_unusable_baselines_are_422_problems(client, options, words):
    body = assert_problem(upload(client, "ok", options), 422, "invalid_options")
    assert words in body["detail"], body


def test_gates_with_baseline_values_given_need_no_baseline_id(client):
    gate = {**RELATIVE, "baseline_values": {"ort_qdq": 30.0}}
    r = upload(client, "ok   ", {"gates": [gate]}, wait=30)
    assert r.status_code == 200, r.text
    assert r.json()["report"]["options"]["gates"][0]["baseline_values"] == {"ort_qdq": 30.0}
    assert json.loads(json.dumps(r.json()["report"]["options"]))["baseline"] is None
