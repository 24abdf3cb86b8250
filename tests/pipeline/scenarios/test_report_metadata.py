"""A file's free-text metadata is shown, not copied whole: an upload with 50 metadata_props of
200 KB each (10 MB) made a 30 MB report.json and a 30 MB page (fp32 and both ORT files carry the
upload's props, and the report repeated each file's). The files keep every byte of it."""
from __future__ import annotations

import onnx
from onnx import helper

from tests import models

N_PROPS, VALUE_CHARS = 50, 200_000


def test_huge_metadata_props_are_shortened_in_the_report_and_kept_in_the_files(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.pipeline.inspect.inventory import MAX_METADATA_PROPS, MAX_METADATA_VALUE
    from service.schemas.options import ComparisonOptions

    model = models.build("matmul", x_shape=[1, 8], w=(8, 8), names=("mm",), ir=8)
    model.producer_name = "P" * 5000
    helper.set_model_props(model, {f"key{i}": f"v{i}" + "A" * VALUE_CHARS for i in range(N_PROPS)})
    onnx.save(model, tmp_path / "meta.onnx")
    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 2, "eval_samples": 2,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    report = run_comparison(ComparisonRequest(model_path=tmp_path / "meta.onnx", model_name="meta.onnx", options=options),
                            tmp_path / "job")

    assert report.artifacts["ort_qdq"].status == "ok"
    assert len(report.model_dump_json()) < 1_000_000  # it was 30 MB
    kept = onnx.load(str(tmp_path / "job" / "artifacts" / "ort_qdq.onnx"), load_external_data=False)
    assert {p.key: p.value for p in kept.metadata_props}["key49"] == "v49" + "A" * VALUE_CHARS
    assert "onnx.quant.pre_process" in report.artifacts["ort_qdq"].file.metadata_props  # ORT's own marks first
    for name, props in (("fp32", N_PROPS), ("ort_qdq", len(kept.metadata_props))):
        info = report.artifacts[name].file
        assert len(info.metadata_props) == MAX_METADATA_PROPS
        assert info.metadata_props_left_out == props - MAX_METADATA_PROPS
        value = info.metadata_props["key3"]
        assert value.startswith("v3AAA") and value.endswith(
            f"[{len('v3') + VALUE_CHARS - MAX_METADATA_VALUE} more characters in the file]")
        assert len(info.producer_name) < 300
