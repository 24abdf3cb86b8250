"""A model the quantizers leave in float (Exp and Sqrt only): the decision rows say n/a, not "never
in an int8 kernel (float kernels between Q/DQ)" about a file without a single Q/DQ (a k-NN classifier
from surfaces-surrogates read that way)."""
from __future__ import annotations

from tests import models


def test_a_file_without_quantized_activations_reads_n_a_for_the_dtype_it_runs(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    models.save("unary", tmp_path / "m.onnx", op=["Exp", "Sqrt"], shape=[1, 8])
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all", "extended"], "calibration_samples": 2, "eval_samples": 1,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "m.onnx", model_name="m.onnx", options=options),
                            tmp_path / "job")
    assert report.artifacts["ort_qdq"].quantization.quantize_linear == 0
    rows = {d.decision: d.where for d in report.decisions}
    assert rows["activation dtype (as written)"]["ort_qdq"] == "n/a (no quantized activations)"
    assert rows["activation dtype (as run)"]["ort_qdq"] == "n/a (no quantized activations)"
    assert any(lint.code == "nothing_quantized" for lint in report.lints)
    from service.render.text import summary_table

    line = next(ln for ln in summary_table(report).splitlines() if ln.startswith("ort_qdq "))
    assert "nothing quantized" in line and "float reference" not in line  # the fp32 row keeps that word
