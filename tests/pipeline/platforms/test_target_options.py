"""The spellings of the targets in options.platforms and in gates (issue 49): clients and CI files use them, so
the server and the client read them alike, and a spelling that is not one is refused with what to write."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from quantcompare_client._gates import format_gate, parse_gate
from service.errors import InvalidOptions
from service.pipeline.ort.targets import platform_from_name
from service.pipeline.verdict.gates import gate_from_string, gate_to_string, verdict_from_artifacts
from service.schemas.options import ComparisonOptions

GATES = ["qnn:69.ort_qdq.compiles", "qnn.pt2e_qdq.nodes_taken_share>=0.9", "ort:1.22.1.same_graphs",
         "openvino:cpu.ort_qdq.sqnr_db>=30", "ort:1.22.1.pt2e_qdq.extended.sqnr_db>=30", "ort_qdq.all.sqnr_db>=25"]


@pytest.mark.parametrize("name,kind,soc", [("qnn:69", "qnn", "69"), ("qnn", "qnn", "69"), ("qnn:0", "qnn", "0"),
                                           ("openvino:cpu", "openvino", None), ("ort:1.22.1", "ort", None)])
def test_each_target_spelling_is_a_platform(name, kind, soc):
    assert ComparisonOptions(platforms=[name]).platforms == [name]
    p = platform_from_name(name)
    assert (p.kind, p.soc) == (kind, soc) and p.name == name
    assert platform_from_name("arm64").kind == "emulated"


@pytest.mark.parametrize("name,said", [("qnn:sm8750", "unknown platform"), ("openvino:gpu", "unknown platform"),
                                       ("ort:1.17.3", "before 1.18 cannot read IR 10"), ("ort:latest", "unknown platform")])
def test_a_spelling_that_is_not_a_target_is_refused_with_what_to_write(name, said):
    with pytest.raises(ValidationError) as e:
        ComparisonOptions(platforms=[name])
    assert said in str(e.value) and ("qnn:<soc_model>" in str(e.value) or "1.18" in str(e.value))


@pytest.mark.parametrize("text", GATES)
def test_server_and_client_read_and_write_target_gates_alike(text):
    gate = gate_from_string(text)
    assert gate_to_string(gate) == format_gate(parse_gate(text)) == text
    assert parse_gate(text).get("platform") == gate.platform


def test_target_metrics_need_a_target_and_a_gate_on_a_target_that_did_not_run_fails():
    with pytest.raises(InvalidOptions) as e:
        gate_from_string("ort_qdq.compiles")
    assert "need a target in front" in e.value.message
    verdict = verdict_from_artifacts({}, ComparisonOptions(), [gate_from_string("qnn:69.ort_qdq.compiles")])
    assert not verdict.passed and "add it to options.platforms" in verdict.gates[0].message


def test_an_ort_release_is_asked_to_run_with_the_jobs_ort_session_and_arm64_with_its_defaults(tmp_path):
    """What the platform's process is asked (emulated_ort.py sets ``session_config`` on each session): another ORT
    release on this machine gets the job's options.ort_session, so a difference it shows is the release's;
    emulated arm64 runs with its own defaults."""
    from service.pipeline.platforms.emulated_levels import _levels_request
    from service.pipeline.runtime.levels import LevelsInput

    config = {"session.qdqisint8allowed": "1"}
    inputs = LevelsInput(artifact_paths={"fp32": tmp_path / "fp32.onnx"}, eval_feeds=[],
                         options=ComparisonOptions.model_validate({"ort_session": config}))
    ask = {name: _levels_request(platform_from_name(name), inputs, ["extended"], tmp_path, False)
           for name in ("ort:1.22.1", "arm64")}
    assert ask["ort:1.22.1"]["session_config"] == config and ask["arm64"]["session_config"] == {}
