"""Report.to_pandas, the inline charts, the CI outputs and the torch-module path, on reports built in code.

The JSON comes from ``client_fakes.report_json`` (the server's report shape); the per-tensor
``layers`` section follows issue 15's rows ``{tensor, op_type, artifacts: {<artifact>: {...}}}``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.missing_tools import require_module
from client_fakes import report_json

import quantcompare_client as qc
from quantcompare_client._ci import junit_from_report, markdown_from_report

pd = require_module("pandas")

LAYERS = {
    "level": "disable_all", "samples": 8, "method": "each fp32 tensor vs the file's value of it",
    "rows": [
        {"tensor": "x", "op_type": "input", "node": "", "depth": 0,
         "artifacts": {"ort_qdq": {"sqnr_db": 48.1, "cosine": 0.99999, "max_abs_error": 0.004, "max_abs_error_lsb": 0.5,
                                   "clipped_share": 0.0, "scale": 0.008, "zero_point": -1, "file_tensor": "x_dq",
                                   "alignment": "by name"}}},
        {"tensor": "conv_out", "op_type": "Conv", "node": "conv", "depth": 1,
         "artifacts": {"ort_qdq": {"sqnr_db": 31.2, "cosine": 0.9996, "max_abs_error": 0.05, "max_abs_error_lsb": 2.1,
                                   "clipped_share": 0.001, "scale": 0.024, "zero_point": 3, "file_tensor": "conv_out_dq",
                                   "alignment": "by structure"},
                       "pt2e_qdq": {"sqnr_db": None, "cosine": 1.0, "max_abs_error": 0.0, "file_tensor": "conv",
                                    "alignment": "by structure"}},
         "left_out": {"ort_qoperator": "fused into QLinearConv: no tensor in the file"}},
    ],
}


def _report(**kw) -> qc.Report:
    return qc.Report(report_json(**kw))


def test_levels_table_has_a_row_per_artifact_and_level_with_the_report_figures():
    r = _report()
    df = r.to_pandas("levels")
    assert len(df) == len(r.artifacts) * len(r.levels)
    row = df[(df.artifact == "ort_qdq") & (df.level == "extended")].iloc[0]
    assert row.sqnr_db == r.sqnr_db("ort_qdq", "extended") and row.median_ms == r.median_ms("ort_qdq", "extended")
    assert row.latency_ratio == pytest.approx(r.median_ms("ort_qdq", "extended") / r.median_ms("fp32", "extended"))
    fp32 = df[df.artifact == "fp32"]
    assert math.isinf(fp32.sqnr_db.iloc[0]) and fp32.latency_ratio.isna().all()  # exact, and no ratio to itself


def test_decisions_and_gates_tables():
    r = _report(verdict={"passed": False, "failures": ["x"], "gates": [
        {"gate": "ort_qdq.all.sqnr_db>=baseline-0.5", "passed": False, "actual": 30.0, "baseline": 31.0, "delta": -1.0,
         "message": "ort_qdq=30 (baseline 31, delta -1) not >= baseline-0.5 (30.5)"}]})
    gates = r.to_pandas("gates")
    assert gates.to_dict("records") == [{"gate": "ort_qdq.all.sqnr_db>=baseline-0.5", "passed": False, "actual": 30.0,
                                         "baseline": 31.0, "delta": -1.0,
                                         "message": "ort_qdq=30 (baseline 31, delta -1) not >= baseline-0.5 (30.5)"}]
    decisions = r.to_pandas("decisions")
    assert list(decisions.index) == [d.decision for d in r.decisions]
    assert list(decisions.columns) == ["pt2e_qdq", "ort_qdq", "ort_qoperator"]


def test_layers_table_is_one_row_per_tensor_and_artifact_with_why_a_figure_is_missing():
    data = report_json()
    data["layers"] = LAYERS
    df = qc.Report(data).to_pandas("layers")
    assert list(zip(df.tensor, df.artifact)) == [("x", "ort_qdq"), ("conv_out", "ort_qdq"), ("conv_out", "pt2e_qdq"),
                                                  ("conv_out", "ort_qoperator")]
    conv = df[(df.tensor == "conv_out") & (df.artifact == "ort_qdq")].iloc[0]
    assert (conv.op_type, conv.sqnr_db, conv.max_abs_error_lsb, conv.clipped_share, conv.scale, conv.zero_point) == (
        "Conv", 31.2, 2.1, 0.001, 0.024, 3)
    assert df.iloc[3].left_out == "fused into QLinearConv: no tensor in the file" and pd.isna(df.iloc[3].sqnr_db)
    assert math.isinf(df.iloc[2].sqnr_db)  # the server's null (identical to fp32), as in the levels table


def test_a_report_without_layers_and_an_unknown_table_are_refused_with_what_to_do():
    r = _report()
    with pytest.raises(ValueError, match="no per-tensor 'layers' table"):
        r.to_pandas("layers")
    with pytest.raises(ValueError, match="one of levels, decisions, gates, layers"):
        r.to_pandas("tensors")


def test_without_pandas_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # what an install without the extra looks like
    with pytest.raises(ImportError, match=r"quantcompare-client\[pandas\]"):
        _report().to_pandas("levels")


def test_charts_are_script_free_svg_with_a_bar_per_measured_value():
    r = _report(failed=("pt2e_qdq",))
    svg = r.charts_svg()
    sqnr, latency = svg.split("<svg")[1:]
    # pt2e_qdq failed: its bars are the "not measured" dash; the two others have one bar per level
    assert sqnr.count("<title>ort_qdq @ ") == 5 and sqnr.count("<title>pt2e_qdq @") == 0
    assert latency.count("<title>fp32 @ ") == 5
    assert "<script" not in svg and "<title>ort_qdq @ all: 31.5 dB</title>" in sqnr


def test_junit_and_markdown_from_a_report():
    r = _report(verdict={"passed": False, "failures": [], "gates": [
        {"gate": "status_ok", "passed": True, "actual": 1.0, "message": "all 3 ok"},
        {"gate": "*.all.sqnr_db>=40", "passed": False, "actual": 31.5, "message": "pt2e_qdq=31.5 not >= 40 & <more>"}]})
    root = ET.fromstring(junit_from_report(r, report_url="http://qc/v1/comparisons/c0ffee/report.html"))
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["status_ok", "*.all.sqnr_db>=40"]
    assert cases[0].find("failure") is None
    assert cases[1].find("failure").get("message") == "pt2e_qdq=31.5 not >= 40 & <more>"  # escaped, read back whole
    props = {p.get("name"): p.get("value") for p in cases[1].findall("./properties/property")}
    assert props["ort_qdq.all.sqnr_db"] == "31.5" and props["actual"] == "31.5"
    md = markdown_from_report(r, level="all", baseline=_report(sqnr=32.0), report_url="http://qc/x")
    assert "| `ort_qdq` | ok | 31.50 (Δ -0.50) |" in md and "[report page](http://qc/x)" in md


def test_example_inputs_without_a_module_is_a_type_error(fake_server):
    import httpx

    with qc.Client("http://qc.test", transport=httpx.MockTransport(fake_server.handler)) as client:
        with pytest.raises(TypeError, match="go with a torch.nn.Module"):
            client.compare("conv_relu", example_inputs=(1,))


def test_the_base_client_imports_nothing_heavy():
    code = ("import sys, quantcompare_client as qc, quantcompare_client.cli\n"
            "from client_fakes import report_json\n"
            "r = qc.Report(report_json()); r._repr_html_(); r.summary_text()\n"
            "qc.Client('http://127.0.0.1:9').close()\n"
            "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'onnx', 'onnxruntime') if m in sys.modules))")
    import client_fakes

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(__import__("pathlib").Path(client_fakes.__file__).parent)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_module_is_exported_to_pt2_bytes_with_its_dynamic_shapes():
    torch = require_module("torch")
    import io

    from quantcompare_client._torch_export import is_torch_module, pt2_from_module

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).train()
    assert is_torch_module(net) and not is_torch_module("conv_relu")
    batch = torch.export.Dim("batch", min=1, max=64)
    data = pt2_from_module(net, (torch.randn(2, 3, 8, 8),), {"input": {0: batch}})
    assert data[:4] == b"PK\x03\x04" and net.training  # a zip archive; the caller's module is left as it was
    program = torch.export.load(io.BytesIO(data))
    x = torch.randn(5, 3, 8, 8)
    torch.testing.assert_close(program.module()(x), net.eval()(x))  # the dynamic batch took 5
    with pytest.raises(ValueError, match="needs example_inputs"):
        pt2_from_module(net, None)
