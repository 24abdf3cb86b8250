"""Typed access, text summary and HTML of a report; the public surface; the gate syntax copy."""

from __future__ import annotations

import math
from html.parser import HTMLParser

import pytest
from client_fakes import report_json

import quantcompare_client as qc
from service.errors import InvalidOptions
from service.pipeline.verdict.gates import gate_from_string, gate_to_string

PUBLIC = {
    "__version__", "Client", "AsyncClient", "DEFAULT_TIMEOUT",
    "Report", "Layers", "LayerRow", "LayerCell", "LayerOrigin", "Platform", "Job", "Progress", "Artifact", "ArtifactFile", "ArtifactLink", "PathError", "Inventory",
    "OptimizedLevel", "UnfusedNode", "Numerics", "OutputNumerics", "Latency", "LevelDiff", "Rewrite", "Decision",
    "Advice", "AdviceFigures", "Recipe", "Profile", "ProfiledNode", "Lint",
    "GateResult", "Verdict", "ModelInfo", "Example",
    "parse_gate", "format_gate", "GateSyntaxError",
    "QuantCompareError", "TransportError", "ConnectError", "Timeout", "WaitTimeout", "APIError", "InvalidRequest",
    "Unauthorized", "NotFound", "PayloadTooLarge", "Busy", "ServerError", "ComparisonFailed",
}


def test_public_surface_is_pinned():
    assert set(qc.__all__) == PUBLIC
    assert len(qc.__all__) == len(set(qc.__all__))
    for name in qc.__all__:
        obj = getattr(qc, name)
        if isinstance(obj, type) or callable(obj):
            assert not getattr(obj, "__module__", "quantcompare_client").startswith("quantcompare_client._"), name


def test_the_error_tree_is_the_one_drawn_in_the_docstring():
    import quantcompare_client._exceptions as exc

    parents = {
        "TransportError": "QuantCompareError", "ConnectError": "TransportError", "Timeout": "TransportError",
        "WaitTimeout": "QuantCompareError", "APIError": "QuantCompareError", "InvalidRequest": "APIError",
        "Unauthorized": "APIError", "NotFound": "APIError", "PayloadTooLarge": "APIError", "Busy": "APIError",
        "ServerError": "APIError", "ComparisonFailed": "QuantCompareError",
    }
    for child, parent in parents.items():
        assert getattr(qc, child).__bases__ == (getattr(qc, parent),), child
        assert child in exc.__doc__
    assert qc.QuantCompareError.__bases__ == (Exception,)


@pytest.fixture
def report() -> qc.Report:
    gates = [{"artifact": "ort_qdq", "level": "all", "metric": "sqnr_db", "op": ">=", "value": 25}]
    verdict = {"passed": False,
               "gates": [{"gate": "ort_qdq.all.sqnr_db>=25", "passed": True, "actual": 31.5, "message": "ort_qdq=31.5 >= 25"},
                         {"gate": "status_ok", "passed": False, "actual": 0.6667, "message": "2/3 ok; ort_qoperator failed"}],
               "failures": ["status_ok: 2/3 ok; ort_qoperator failed"]}
    return qc.Report(report_json(failed=("ort_qoperator",), gates=gates, verdict=verdict))


def test_typed_access_over_the_report(report):
    qdq = report.artifacts["ort_qdq"]
    assert qdq.ok and qdq.status == "ok" and qdq.error is None
    assert qdq.quantization.format == "qdq" and qdq.quantization.bias_summary == "int32"
    assert qdq.file.size == 1234 and qdq.file.producer == "onnx.quantize 0.1.0"
    assert list(qdq.optimized) == ["disable_all", "basic", "extended", "layout", "all"]
    lv = qdq.optimized["all"]
    assert lv.op_histogram == {"QLinearConv": 1} and lv.node_count == 1 and lv.int8_coverage == 1.0
    assert lv.numerics.worst_sqnr_db == 31.5 and lv.numerics.outputs[0].name == "y"
    assert lv.latency.median_ms == 0.8 and lv.latency.runs == 10
    assert [str(r) for r in qdq.optimized["extended"].diff.rewrites] == [
        "DequantizeLinear x3 + Conv + Relu + QuantizeLinear -> QLinearConv"]
    assert report.sqnr_db("ort_qdq") == 31.5 and report.cosine("ort_qdq", "basic") == 0.9995
    assert report.latency_ratio("ort_qdq") == pytest.approx(0.5)
    assert report.int8_coverage("pt2e_qdq", "all") == 1.0
    assert report.sqnr_db("ort_qoperator") is None and report.level("nope") is None
    # the server writes null for an exactly-zero error: the client reads it as infinite SQNR
    assert math.isinf(report.sqnr_db("fp32"))
    failed = report.artifacts["ort_qoperator"]
    assert not failed.ok and failed.error.stage == "quantize" and failed.optimized == {}
    assert report.decisions[0].where["ort_qdq"] == "in the file"
    assert report.lints[0].code == "s8_to_u8"
    assert report.verdict.passed is False and not report.verdict
    assert report.verdict.gates[0] == qc.GateResult("ort_qdq.all.sqnr_db>=25", True, 31.5, "ort_qdq=31.5 >= 25")
    assert report.model.name == "conv_relu" and report.levels[-1] == "all"
    assert report.raw["schema_version"] == "1"


def test_repr_is_one_readable_line(report):
    text = repr(report)
    assert text.startswith("<Report c0ffee model='conv_relu'")
    assert "ort_qoperator=failed" in text and text.endswith("verdict=failed>")
    assert "\n" not in text
    assert repr(report.artifacts["ort_qoperator"]).startswith("<Artifact ort_qoperator failed: quantize: AttributeError")
    assert repr(report.artifacts["ort_qdq"]) == "<Artifact ort_qdq ok qdq levels=[disable_all, basic, extended, layout, all]>"


def test_summary_is_a_compact_table_with_the_verdict(report, capsys):
    report.summary()
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("quantcompare report c0ffee · model conv_relu (example)")
    assert lines[1].startswith("!! MADE-UP DATA")  # the fake's samples are generated
    header = lines[3].split()
    assert header == ["artifact", "status", "format", "bias", "nodes", "int8", "sqnr_db", "cosine", "max_abs", "ms", "x", "fp32"]
    row = {line.split()[0]: line.split() for line in lines[4:8]}
    assert row["ort_qdq"][:4] == ["ort_qdq", "ok", "qdq", "int32"]
    assert row["ort_qdq"][5:8] == ["100%", "31.5", "0.99950"] and row["ort_qdq"][-1] == "0.50"
    assert row["fp32"][6] == "inf"
    assert row["ort_qoperator"][1] == "failed"
    assert "ort_qoperator failed: quantize: AttributeError" in text
    assert "verdict: FAILED (1/2 gates)" in text and "FAIL  status_ok" in text
    assert len(lines) < 25 and max(map(len, lines)) <= 200
    assert str(report) == text.rstrip("\n")


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        if self.tags and self.tags[-1] in ("td", "th"):
            self.cells.append(data)


def test_repr_html_is_a_table_a_notebook_can_render(report):
    html = report._repr_html_()
    parser = _Cells()
    parser.feed(html)
    assert "<table>" in html and html.count("<tr") >= 5
    assert {"artifact", "SQNR dB", "× fp32", "ort_qdq", "31.5", "failed"} <= set(parser.cells)
    assert "verdict: FAILED" in html and "bias quantized to int32" in html


def test_html_escapes_what_the_server_sends():
    data = report_json(failed=("pt2e_qdq",))
    data["artifacts"]["pt2e_qdq"]["error"]["message"] = "<script>alert(1)</script>"
    html = qc.Report(data)._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_unknown_fields_are_kept_and_missing_ones_are_none():
    data = report_json()
    data["something_new"] = {"x": 1}
    del data["artifacts"]["ort_qdq"]["optimized"]["all"]["latency"]
    data["artifacts"]["ort_qdq"]["optimized"]["all"]["numerics"] = None
    r = qc.Report(data)
    assert r.raw["something_new"] == {"x": 1}
    assert r.artifacts["ort_qdq"].optimized["all"].latency is None
    assert r.median_ms("ort_qdq") is None and r.latency_ratio("ort_qdq") is None and r.sqnr_db("ort_qdq") is None
    r.summary_text()
    r._repr_html_()


def test_save_and_load_round_trip(report, tmp_path):
    path = report.save(tmp_path / "report.json")
    again = qc.Report.load(path)
    assert again.raw == report.raw and repr(again) == repr(report)


# ---- the client's copy of the gate syntax stays in step with the server's --------------------

GATE_TEXTS = ["ort_qdq.all.sqnr_db>=25", "*.basic.cosine > 0.99", "pt2e_qdq.latency_ratio<=1.2",
              "extended.int8_coverage==1", "status_ok", "ort_qdq.status_ok", "status_ok>=0.5",
              "ort_qoperator.max_abs_error<1e-2", "", "ort_qdq.all.sqnr>=25", "ort_qdq.all.sqnr_db>=abc",
              "ort_qdq.all.sqnr_db", "fp16.all.sqnr_db>=1", "all.ort_qdq.sqnr_db>=1", "ort_qdq.ort_qdq.sqnr_db>=1",
              "a.b.c.sqnr_db>=1", "ort_qdq.all.sqnr_db>=nan", "basic.all.cosine>=1",
              "ort_qdq.all.sqnr_db>=baseline-0.5", "*.latency_ratio<=baseline+0.1", "cosine>=baseline",
              "ort_qdq.all.sqnr_db>=baseline-", "status_ok>=baseline", "ort_qdq.all.sqnr_db>=baseline--1",
              "ort_qdq.all.sqnr_db>=baseline-inf", "ort_qdq.all.sqnr_db>=inf", "*.all.angular_error<=0.05",
              "ort_qdq.argmax_agreement>=0.99"]


@pytest.mark.parametrize("text", GATE_TEXTS, ids=repr)
def test_client_and_server_parse_gates_alike(text):
    try:
        server = gate_from_string(text)
    except InvalidOptions:
        with pytest.raises(qc.GateSyntaxError):
            qc.parse_gate(text)
        return
    client = qc.parse_gate(text)
    # The client leaves unset fields out; `on_noisy` exists only in a gate's JSON form, not its text.
    assert client == server.model_dump(exclude_none=True, exclude={"on_noisy"})
    assert qc.format_gate(client) == gate_to_string(server)


def test_generated_samples_are_flagged_in_the_summary_and_the_notebook_table():
    data = report_json()
    data["samples"] = {**data["samples"], "source": "generated", "generators": {"x": "normal(0, 1)"}}
    made_up = qc.Report(data)
    assert made_up.made_up_data and "x: normal(0, 1)" in made_up.made_up_data
    assert "!! MADE-UP DATA" in made_up.summary_text() and "MADE-UP DATA" in made_up._repr_html_()
    data["samples"] = {**data["samples"], "source": "uploaded", "generators": {"x": "uploaded"}}
    real = qc.Report(data)
    assert real.made_up_data is None and "MADE-UP" not in real.summary_text() + real._repr_html_()


def test_advice_and_unfused_nodes_are_typed_from_what_the_server_writes():
    """Built with the server's own schema models, so a renamed field on either side fails here."""
    from service.schemas.advice import AdviceEntry, AdviceFigures, AdviceMeasured, UnfusedNode

    data = report_json()
    node = UnfusedNode(node="conv1", op_type="Conv", blocker="output_not_quantized", detail="Y is float",
                       fix="quantize the output")
    data["artifacts"]["ort_qdq"]["optimized"]["all"]["unfused"] = [node.model_dump(mode="json")]
    measured = AdviceEntry(artifact="ort_qdq", change={"ort": {"activation_type": "uint8"}}, reason="u8 fuses",
                           blocked_nodes=1, measured=AdviceMeasured(
                               before=AdviceFigures(int8_coverage=0.5, latency_ms=2.0, sqnr_db=30.0, level="all"),
                               after=AdviceFigures(int8_coverage=1.0, latency_ms=1.5, sqnr_db=None, level="all")))
    unmeasured = AdviceEntry(artifact="pt2e_qdq", change={"session": {"session.qdqisint8allowed": "1"}},
                             reason="refuted: slower", adopted=False)
    data["advice"] = [measured.model_dump(mode="json")]
    data["advice_refuted"] = [unmeasured.model_dump(mode="json")]

    r = qc.Report(data)
    assert r.level("ort_qdq").unfused == [qc.UnfusedNode("conv1", "Conv", "output_not_quantized", "Y is float",
                                                          "quantize the output")]
    assert r.level("ort_qdq", "basic").unfused == []
    (a,) = r.advice
    assert (a.artifact, a.change, a.adopted, a.blocked_nodes) == ("ort_qdq", {"ort": {"activation_type": "uint8"}},
                                                                   True, 1)
    assert a.before == qc.AdviceFigures(0.5, 2.0, 30.0, "all") and a.after.sqnr_db is None
    (b,) = r.advice_refuted
    assert not b.adopted and b.before is None and b.after is None and b.reason == "refuted: slower"


def test_a_partial_report_says_running_not_failed():
    """wait(until=section) returns a running job's report: its verdict is not in yet (null on the wire)."""
    from quantcompare_client import Report

    report = Report({"id": "j", "partial": True, "sections_done": ["files", "level_graphs"], "verdict": None,
                     "model": {"name": "m"}, "artifacts": {}})
    assert "verdict=running" in repr(report)
    assert report._verdict_line() == "verdict: RUNNING (sections done: files, level_graphs)"


def test_recipe_and_profile_are_typed_from_what_the_server_writes():
    """Issue 51: the recipe prints as the Python to paste; the profile's top nodes carry their kernel.
    Built with the server's own code (recipe_for, the schema models), so a renamed field fails here."""
    from service.pipeline.advice.recipe import RecipeBase, recipe_for
    from service.schemas.advice import AdviceEntry
    from service.schemas.levels import OpProfile, ProfiledNode
    from service.schemas.options import ComparisonOptions

    recipe = recipe_for("ort_qdq", {"ort": {"activation_type": "uint8"}},
                        RecipeBase(options=ComparisonOptions(), input_names=["x"], calibration_count=4))
    data = report_json()
    entry = AdviceEntry(artifact="ort_qdq", change={"ort": {"activation_type": "uint8"}}, reason="u8", recipe=recipe)
    data["advice"] = [entry.model_dump(mode="json")]
    profile = OpProfile(total_ms=2.0, kernels_ms=1.9, by_op_type={"QLinearConv": 1.5}, by_class={"int8 kernels": 1.5},
                        top_nodes=[ProfiledNode(node="conv1", op_type="QLinearConv", ms=1.5, share=0.75, kernel="s8s8")],
                        where_it_loses="ort_qdq at all: 75% of the time in 1 QLinearConv on s8s8 kernels")
    data["artifacts"]["ort_qdq"]["optimized"]["all"]["profile"] = profile.model_dump(mode="json")

    r = qc.Report(data)
    (a,) = r.advice
    assert str(a.recipe) == recipe.python and "activation_type=QuantType.QUInt8" in str(a.recipe)
    assert a.recipe.quantize_static["activation_type"] == "QuantType.QUInt8" and a.recipe.exact
    assert "<pre><code" in a.recipe._repr_html_()
    p = r.level("ort_qdq").profile
    assert p.top_nodes == [qc.ProfiledNode("conv1", "QLinearConv", 1.5, 0.75, "s8s8")]
    assert p.where_it_loses.endswith("on s8s8 kernels") and r.level("ort_qdq", "basic").profile is None
