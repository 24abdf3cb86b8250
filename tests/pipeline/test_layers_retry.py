"""Exclude and retry: the worst origin nodes re-quantized in float by each tool's own filter."""

from __future__ import annotations

import onnx
import pytest

from service.pipeline.runtime.layers import layers_from_files
from service.pipeline.runtime.layers_retry import (RetryInputs, advice_from_retry, requantizer, retry_without_origins,
                                                   worst_origin_nodes)


@pytest.fixture(scope="module")
def retried(compared, tmp_path_factory):
    from service.pipeline.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.inputs.samples import generated_samples
    from service.pipeline.inputs.sources import source_from_example
    from service.pipeline.inputs.specs import resolved_input_shapes

    _, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    options = ComparisonOptions(calibration_samples=4, eval_samples=2)
    source = source_from_example("op_zoo_net")
    shapes, _ = resolved_input_shapes(source.specs, {})
    samples = generated_samples(source.specs, shapes, options)
    paths = {a: art / f"{a}.onnx" for a in ("pt2e_qdq", "ort_qdq")}
    layers = layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths=paths, eval_feeds=samples.evaluation)
    fp32_model = onnx.load(str(art / "fp32.onnx"))
    out = tmp_path_factory.mktemp("retry")
    run = requantizer(source=source, shapes=shapes, calibration=samples.calibration, input_names=["x"],
                      ort_input=art / "fp32.onnx", ort_settings=resolved_ort_settings(options), per_channel=True,
                      fp32_model=fp32_model)
    retry = retry_without_origins(layers, RetryInputs(fp32_path=art / "fp32.onnx", artifact_paths=paths,
                                                      eval_feeds=samples.evaluation, requantize=run, out_dir=out,
                                                      latency_runs=3), k=1, max_seconds=120)
    return layers, retry, out


def test_the_excluded_node_runs_in_float_in_the_retried_ort_file(retried):
    layers, retry, out = retried
    r = next(r for r in retry.artifacts if r.artifact == "ort_qdq")
    assert r.error is None and r.excluded_nodes == worst_origin_nodes(layers, "ort_qdq", 1)
    model = onnx.load(str(out / "ort_qdq.retry.onnx"))
    producer = {o: n for n in model.graph.node for o in n.output}
    node = next(n for n in model.graph.node if n.name == r.excluded_nodes[0])
    weights = [i for i in node.input[1:] if i in producer]
    assert not any(producer[i].op_type == "DequantizeLinear" for i in weights)  # float weights: not quantized
    assert r.sqnr_db_before is not None and r.sqnr_db_after is not None and r.latency_ms_after > 0


def test_pt2e_excludes_through_the_module_or_says_why_not(retried):
    _, retry, out = retried
    r = next((r for r in retry.artifacts if r.artifact == "pt2e_qdq"), None)
    assert r is not None
    if r.error:
        assert "module scope" in r.error
    else:
        assert r.how.startswith("XNNPACKQuantizer module_name_config[")
        model = onnx.load(str(out / "pt2e_qdq.retry.onnx"))
        # the excluded module's op reads float weights: no DequantizeLinear feeds its weight input
        producer = {o: n for n in model.graph.node for o in n.output}
        scope = r.how.split("[", 1)[1].split("]", 1)[0]
        ops = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")
               and any(p.key == "pkg.torch.onnx.name_scopes" and f"'{scope}'" in p.value for p in n.metadata_props)]
        assert ops and all(producer.get(n.input[1]) is None or producer[n.input[1]].op_type != "DequantizeLinear"
                           for n in ops)


def test_advice_items_carry_the_before_and_after_figures(retried):
    _, retry, _ = retried
    items = advice_from_retry(retry)
    assert items
    for item in items:
        assert item["code"] in ("exclude_nodes_from_quantization", "exclusion_did_not_help")
        ev = item["evidence"]
        assert (ev["sqnr_db_after"] - ev["sqnr_db_before"] >= 1.0) == (item["code"] == "exclude_nodes_from_quantization")
