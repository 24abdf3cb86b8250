"""Per-tensor error on a real third-party model (PaddleOCR's text-direction classifier, opset 11,
a '-1' batch dim): ORT QDQ figures against an independent ORT run that exposes the same tensors."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))
from test_layers import check_against_oracle, ort_qdq_oracle  # noqa: E402


def test_ort_qdq_figures_match_an_independent_run_on_ppocr_mobile_cls(corpus_dir, tmp_path):
    import numpy as np

    from service.pipeline.quantize.onnx_cleanup import opset_for_ort
    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_quant import quantized_by_ort
    from service.pipeline.layers.layers import layers_from_files
    from tests.realworld.corpus import BY_NAME, MissingCorpusPackage

    try:
        fp32_path = BY_NAME["ppocr_mobile_cls"].locate(corpus_dir)
    except MissingCorpusPackage as e:
        pytest.skip(str(e))
    model = onnx.load(str(fp32_path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    ort_input, _ = opset_for_ort(fp32_path, tmp_path / "fp32.opset13.onnx", opset=opset)
    rng = np.random.default_rng(3)
    calib = [{"x": rng.uniform(-1, 1, (1, 3, 48, 96)).astype(np.float32)} for _ in range(4)]
    feeds = [{"x": rng.uniform(-1, 1, (1, 3, 48, 96)).astype(np.float32)} for _ in range(2)]
    qdq = tmp_path / "ort_qdq.onnx"
    quantized_by_ort(ort_input, qdq, calib, ["x"], quant_format="qdq",
                     settings=resolved_ort_settings(ComparisonOptions()))
    report = layers_from_files(fp32_path=fp32_path, artifact_paths={"ort_qdq": qdq}, eval_feeds=feeds)
    assert len(report.rows) >= 50
    assert report.aligned_all_share >= 0.5
    check_against_oracle(report, ort_qdq_oracle(fp32_path, qdq, feeds))


def test_half_of_the_rows_are_aligned_across_the_three_tools_on_ppocr_mobile_cls(corpus_report):
    """The whole pipeline on the real model (the suite's corpus run, shared): PT2E reaches it through
    the ONNX->torch converter and a re-export, so its tensors are found by structure and by the
    modules the converter named after the ONNX nodes."""
    report = corpus_report("ppocr_mobile_cls")
    if isinstance(report, Exception):
        pytest.skip(f"refused: {report}")
    ok = {a for a, art in report.artifacts.items() if a != "fp32" and art.status == "ok"}
    if "pt2e_qdq" not in ok:
        pytest.skip("the PT2E path did not run on this model here")
    layers = report.layers
    assert layers is not None and len(layers.rows) >= 50
    assert layers.aligned_all_share >= 0.5
    by_scope = [c for r in layers.rows for a, c in r.artifacts.items() if a == "pt2e_qdq" and "named after" in c.alignment]
    assert by_scope  # GlobalAveragePool comes back from torch as ReduceMean
