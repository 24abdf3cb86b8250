"""The built-in op_zoo_net compared with every target (issue 49): the failures and differences the trial found
(shared notes, targets.md) appear in its report as rows, lints and gate results, with the target's reason.

Pinned to the wheels `make` installs: onnxruntime-qnn 2.7.0 (QNN 2.51), openvino 2026.4.1, onnxruntime 1.22.1,
against this machine's onnxruntime 1.32.0.
"""

from __future__ import annotations

import pytest

from quantcompare_client._platforms import platforms_from
from service.pipeline.ort.targets import host_platform
from service.render.text import summary_table

pytestmark = pytest.mark.skipif(host_platform().arch not in ("x86_64", "AMD64"),
                                reason="the QNN wheel and the measured behaviour are x86-64 Linux")

TARGETS = ["qnn:69", "qnn:0", "openvino:cpu", "ort:1.22.1"]
GATES = [{"platform": "qnn:69", "artifact": "ort_qdq", "metric": "compiles"},
         {"platform": "qnn:0", "artifact": "ort_qdq", "metric": "compiles"},
         {"platform": "ort:1.22.1", "metric": "same_graphs"},
         {"platform": "ort:1.22.1", "artifact": "ort_qdq", "metric": "same_graphs"},
         {"platform": "openvino:cpu", "artifact": "ort_qdq", "metric": "sqnr_db", "value": 30}]


@pytest.fixture(scope="module")
def op_zoo(compared):
    report, workdir = compared("op_zoo_net", platforms=TARGETS, gates=GATES, advice={"enabled": False},
                               layers={"enabled": False})
    return report, workdir


def _lints(report, code):
    return [lint for lint in report.lints if lint.code == code]


def test_qnn_takes_the_pt2e_file_but_the_graph_io_and_refuses_the_qoperator_file(op_zoo):
    report, workdir = op_zoo
    qnn = report.platforms["qnn:69"]
    pt2e = qnn.artifacts["pt2e_qdq"]
    assert (pt2e.status, pt2e.nodes_taken, pt2e.nodes_total) == ("ok", 56, 58)
    assert {n.op_type for n in pt2e.nodes_left} == {"QuantizeLinear", "DequantizeLinear"}
    assert all("graph input" in n.reason or "graph output" in n.reason for n in pt2e.nodes_left)
    assert all((workdir / "artifacts" / f).is_file() for f in pt2e.context_binary)
    qop = qnn.artifacts["ort_qoperator"]
    assert qop.status == "failed" and "NHWC format" in qop.error and "QDQ" in qop.hint
    assert any(lint.artifact == "ort_qoperator" and lint.message.startswith("qnn:69 does not compile")
               for lint in _lints(report, "target_compile_failed"))
    assert report.artifacts["ort_qoperator"].status == "ok"  # the host's results stay


def test_without_a_chip_qnn_cannot_finalize_the_ort_qdq_file(op_zoo):
    report, _ = op_zoo
    art = report.platforms["qnn:0"].artifacts["ort_qdq"]
    assert art.status == "failed" and "QNN_COMMON_ERROR_MEM_ALLOC" in art.error and "qnn:<soc_model>" in art.hint
    assert report.platforms["qnn:69"].artifacts["ort_qdq"].status == "ok"  # the same file with a chip named
    row = next(r for r in report.platforms["qnn:0"].side_by_side if r.artifact == "ort_qdq")
    assert not row.same and row.differences[0].startswith("qnn:0: ort_qdq does not compile")


def test_ort_1_22_1_fuses_one_conv_less_on_the_pt2e_file_and_has_no_layout_level(op_zoo):
    report, _ = op_zoo
    rel = report.platforms["ort:1.22.1"]
    ext = next(r for r in rel.side_by_side if (r.artifact, r.level) == ("pt2e_qdq", "extended"))
    assert not ext.same and any("fuses 1 Conv less on pt2e_qdq at extended" in d for d in ext.differences)
    assert all(r.same for r in rel.side_by_side if r.artifact == "ort_qdq" and r.level != "layout")
    assert rel.artifacts["pt2e_qdq"].op_histogram["extended"]["Conv"] == 3
    assert any("fuses 1 Conv less" in lint.message for lint in _lints(report, "target_fuses_differently"))
    assert _lints(report, "target_level_missing")
    assert rel.optimized["pt2e_qdq"]["all"].numerics is not None


def test_openvino_reads_the_qdq_files_and_not_the_per_channel_qoperator_file(op_zoo):
    report, _ = op_zoo
    ov = report.platforms["openvino:cpu"]
    assert ov.artifacts["ort_qdq"].status == "ok" and ov.artifacts["ort_qdq"].precision_histogram.get("u8")
    assert ov.artifacts["ort_qoperator"].status == "failed" and "OpConversionFailure" in ov.artifacts["ort_qoperator"].error


def test_gates_on_targets_read_the_targets(op_zoo):
    report, _ = op_zoo
    results = {r.gate: r for r in report.verdict.gates}
    assert results["qnn:69.ort_qdq.compiles"].passed
    assert not results["qnn:0.ort_qdq.compiles"].passed and "MEM_ALLOC" in results["qnn:0.ort_qdq.compiles"].message
    same = results["ort:1.22.1.same_graphs"]
    assert not same.passed and "fuses 1 Conv less on pt2e_qdq" in same.message
    assert results["ort:1.22.1.ort_qdq.same_graphs"].passed is False  # no layout level there: a difference too
    assert results["openvino:cpu.ort_qdq.sqnr_db>=30"].passed


def test_the_cli_and_the_client_name_each_difference(op_zoo):
    report, _ = op_zoo
    text = summary_table(report)
    assert f"{host_platform().name} | qnn:69" in text and "latency on qnn:69: not measured" in text
    assert "qnn:0: ort_qdq does not compile" in text and "fuses 1 Conv less on pt2e_qdq" in text
    client = platforms_from(report.model_dump(mode="json")["platforms"])
    assert client["qnn:0"].compiles("ort_qdq") is False and client["qnn:69"].nodes_taken("pt2e_qdq") == 56
    assert client["openvino:cpu"].sqnr_db("ort_qdq") > 30
    assert any("fuses 1 Conv less" in d for d in client["ort:1.22.1"].differences())
