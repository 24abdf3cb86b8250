"""Where this machine differs from the chapter's arm64 measurements, derived from what ORT did."""

from __future__ import annotations

import platform

import pytest

x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="pins x86-64 behaviour")


@x86_only
def test_op_zoo_on_x86_reports_uint8_activations_and_nchwc_with_evidence(compared):
    report, _ = compared("op_zoo_net")
    notes = {n.topic: n for n in report.platform}
    dtype = notes["activation dtype"]
    assert "QDQS8ToU8Transformer" in dtype.here
    assert any(e.startswith("pt2e_qdq at extended") for e in dtype.evidence)
    assert any(e.startswith("ort_qdq at extended") for e in dtype.evidence)
    # The QOperator file's kernels are written by quantize_static: no int8 -> uint8 rewrite there.
    assert not any(e.startswith("ort_qoperator") for e in dtype.evidence)
    assert notes["NCHWc"].evidence[0].startswith("fp32 at layout")
    assert "int8 dot product" in notes


@x86_only
def test_the_summary_and_the_page_data_carry_the_notes(compared):
    from service.render.text import summary_table

    report, _ = compared("conv_relu")
    text = summary_table(report)
    assert "differs from the chapter (arm64)" in text and "activation dtype" in text
