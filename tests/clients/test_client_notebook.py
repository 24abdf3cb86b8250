"""A real notebook (clients/python/examples/quantcompare.ipynb) run by nbclient in an ipykernel
against a live server: its outputs hold the report's HTML table, the SVG charts and DataFrames.
"""

from __future__ import annotations

import pytest

from tests.missing_tools import require_module
from client_fakes import REPO

nbformat = require_module("nbformat")
nbclient = require_module("nbclient")
require_module("ipykernel")
require_module("pandas")

NOTEBOOK = REPO / "clients" / "python" / "examples" / "quantcompare.ipynb"


def _html(cell) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in cell.get("outputs", [])
                   if o.get("output_type") in ("execute_result", "display_data"))


@pytest.fixture(scope="module")
def executed(live_server, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("QUANTCOMPARE_URL", live_server.url)  # the kernel inherits this process's environment
    mp.delenv("QUANTCOMPARE_API_TOKEN", raising=False)
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        cwd = tmp_path_factory.mktemp("notebook")
        nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        mp.undo()
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_report_cell_shows_the_table_and_both_charts_without_scripts(executed):
    html = _html(executed[1])
    assert "<table>" in html and "<th>SQNR dB</th>" in html and "ort_qdq" in html
    assert html.count("<svg") == 2
    assert 'aria-label="SQNR vs fp32 (worst output; higher is better)"' in html
    assert 'aria-label="Latency per run (median; lower is better)"' in html
    # one bar group per level the notebook asked for, one bar per quantized artifact in the SQNR chart
    sqnr_svg = html.split("<svg")[1]
    for level in ("disable_all", "extended", "all"):
        assert f">{level}</text>" in sqnr_svg
    assert sqnr_svg.count("<rect") - 1 - 3 == 3 * 3  # background, 3 legend swatches, 3 levels x 3 artifacts
    assert "<script" not in html.lower() and "onload" not in html.lower()


def test_to_pandas_cells_render_dataframes(executed):
    pivot = _html(executed[2])
    assert 'class="dataframe"' in pivot and "ort_qoperator" in pivot and "extended" in pivot
    decisions = _html(executed[3])
    assert 'class="dataframe"' in decisions and "bias to int32" in decisions


def test_a_torch_module_is_exported_uploaded_and_compared(executed):
    html = _html(executed[4])
    assert 'class="dataframe"' in html
    assert html.count(">ok<") == 4 * 3  # fp32 + three paths, at three levels
    assert not any(o.get("output_type") == "error" for c in executed for o in c.get("outputs", []))
    text = "".join(o.get("data", {}).get("text/plain", "") for o in executed[5].get("outputs", []))
    assert text == "('pt2', 'SmallNet')"  # the upload's name, as the report titles it
