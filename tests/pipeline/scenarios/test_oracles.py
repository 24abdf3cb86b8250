"""Every figure of a level row, recomputed by the test from sources the program does not control.

* numerics.py by hand-computed values (identical outputs, the -200 dB floor, zero vectors);
* SQNR, cosine, max abs error and drift in quantization steps from ORT outputs of sessions the
  test opens itself, on samples the test uploaded;
* op histograms from the graph ORT itself saves for each level (``optimized_model_filepath``), and
  every op type a level adds or removes named by one of that level's rewrites;
* an int32 bias's scale = input scale x weight scale, read from the file with onnx.numpy_helper.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from service.pipeline.runtime import numerics

LEVELS = {"disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "layout": ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
ARTIFACTS = ("fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator")
N_CAL, N_EVAL = 4, 3


# ---- numerics.py on values computed by hand ---------------------------------------------------

def test_sqnr_of_identical_outputs_is_none_meaning_infinite():
    x = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    assert numerics.sqnr_db(x, x.copy()) is None


def test_sqnr_of_a_known_noise_power():
    ref = np.ones(4, dtype=np.float32)  # signal power 4
    got = ref + np.array([0.1, -0.1, 0.1, -0.1], dtype=np.float32)  # noise power 0.04
    assert numerics.sqnr_db(ref, got) == pytest.approx(20.0, abs=1e-5)
    assert numerics.sqnr_db(ref, ref * 2) == pytest.approx(0.0, abs=1e-9)  # noise = signal


def test_sqnr_of_a_zero_reference_is_the_floor():
    assert numerics.sqnr_db(np.zeros(3), np.array([0.0, 1e-3, 0.0])) == -200.0
    assert numerics.sqnr_db(np.array([1e-30, 0.0]), np.array([1.0, 1.0])) == -200.0  # clamped, not -inf


def test_cosine_of_zero_parallel_and_opposite_vectors():
    assert numerics.cosine(np.zeros(3), np.zeros(3)) == 1.0
    assert numerics.cosine(np.zeros(3), np.ones(3)) == 0.0
    assert numerics.cosine(np.ones(3), np.zeros(3)) == 0.0
    assert numerics.cosine(np.array([1.0, 2.0]), np.array([2.0, 4.0])) == pytest.approx(1.0)
    assert numerics.cosine(np.array([1.0, 0.0]), np.array([-3.0, 0.0])) == pytest.approx(-1.0)
    assert numerics.cosine(np.array([1.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(1 / math.sqrt(2))


def test_max_abs_error_and_drift_in_steps():
    assert numerics.max_abs_error(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    assert numerics.max_abs_error(np.array([1.0, 5.0]), np.array([1.5, 2.0])) == 3.0
    ref, prev, got = np.array([[1.0, 2.0]]), np.array([[1.0, 2.0]]), np.array([[1.0, 2.5]])
    row = numerics.level_numerics(numerics.RunOutputs(["y"], [ref]), numerics.RunOutputs(["y"], [got]), steps=[0.25],
                                  previous=[prev], samples=1)
    out = row.outputs[0]
    assert out.drift_max_abs == 0.5 and out.drift_steps == 2.0  # 0.5 / 0.25
    assert row.worst_sqnr_db == pytest.approx(10 * math.log10(5 / 0.25))


# ---- a real comparison, recomputed ---------------------------------------------------------------

@pytest.fixture(scope="module")
def uploaded(tmp_path_factory, tiny_onnx_models):
    """tiny_conv_net (Conv, Relu, MaxPool, Gemm) compared with samples the test wrote: (report, workdir, eval feeds)."""
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    folder = tmp_path_factory.mktemp("oracle")
    shape = [1, *onnx.load(str(tiny_onnx_models["tiny_conv_net"])).graph.input[0].type.tensor_type.shape.dim[1:]]
    shape = [1] + [d.dim_value for d in shape[1:]]
    x = np.random.default_rng(3).standard_normal((N_CAL + N_EVAL, *shape)).astype(np.float32)
    np.savez(folder / "samples.npz", x=x)
    options = ComparisonOptions.model_validate({"calibration_samples": N_CAL, "eval_samples": N_EVAL,
                                                "latency": {"enabled": False}, "input_shapes": {"x": shape}})
    report = run_comparison(ComparisonRequest(model_path=tiny_onnx_models["tiny_conv_net"], model_name="tiny_conv_net.onnx",
                                              calibration_path=folder / "samples.npz", options=options), folder / "job")
    return report, folder / "job", [{"x": x[i]} for i in range(N_CAL, N_CAL + N_EVAL)]


def _run_level(model_path, level: str, saved, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.optimized_model_filepath = str(saved)
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, f)[0] for f in feeds])


def _op_histogram(path) -> Counter:
    """Op types of ORT's saved graph, a custom domain written before the type (com.microsoft.QGemm)."""
    return Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                   for n in onnx.load(str(path), load_external_data=False).graph.node)


def _output_step(path) -> float | None:
    """The scale of the DequantizeLinear that produces the graph output, read from the file."""
    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"}
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer.get(model.graph.output[0].name)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    return float(np.asarray({**consts, **inits}[node.input[1]]).max())


@pytest.fixture(scope="module")
def recomputed(uploaded, tmp_path_factory):
    """{(artifact, level): (outputs, ORT's saved graph)} from sessions this test opened."""
    _, workdir, feeds = uploaded
    out = tmp_path_factory.mktemp("saved")
    return {(a, lv): (_run_level(workdir / "artifacts" / f"{a}.onnx", lv, out / f"{a}.{lv}.onnx", feeds),
                      out / f"{a}.{lv}.onnx")
            for a in ARTIFACTS for lv in LEVELS}


@pytest.mark.parametrize("artifact", ARTIFACTS[1:])
def test_level_numerics_equal_a_recomputation_from_ort_outputs(uploaded, recomputed, artifact):
    report, workdir, _ = uploaded
    reference = recomputed[("fp32", "disable_all")][0].astype(np.float64)
    step = _output_step(workdir / "artifacts" / f"{artifact}.onnx")
    previous = None
    for level in LEVELS:
        got = recomputed[(artifact, level)][0].astype(np.float64)
        row = report.artifacts[artifact].optimized[level].numerics
        (o,) = row.outputs
        noise = reference - got
        want_sqnr = None if not noise.any() else 10 * math.log10((reference ** 2).sum() / (noise ** 2).sum())
        assert o.sqnr_db == pytest.approx(want_sqnr, abs=1e-6), (artifact, level)
        assert row.worst_sqnr_db == o.sqnr_db
        cos = (reference * got).sum() / (np.linalg.norm(reference) * np.linalg.norm(got))
        assert o.cosine == pytest.approx(cos, abs=1e-9) and row.worst_cosine == o.cosine
        assert o.max_abs_error == pytest.approx(np.abs(noise).max(), abs=1e-9)
        assert row.samples == N_EVAL
        if step is not None:
            assert o.output_step == pytest.approx(step, rel=1e-6)
        if previous is None:
            assert o.drift_max_abs is None
        else:
            drift = np.abs(got - previous).max()
            assert o.drift_max_abs == pytest.approx(drift, abs=1e-9), (artifact, level)
            if step:
                assert o.drift_steps == pytest.approx(drift / step, rel=1e-6, abs=1e-9)
        previous = got


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_level_histograms_are_ort_saved_graphs(uploaded, recomputed, artifact):
    report, _, _ = uploaded
    for level in LEVELS:
        saved = recomputed[(artifact, level)][1]
        assert report.artifacts[artifact].optimized[level].op_histogram == dict(_op_histogram(saved)), (artifact, level)


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_every_op_a_level_adds_or_removes_is_named_by_a_rewrite(uploaded, recomputed, artifact):
    report, _, _ = uploaded
    names = list(LEVELS)
    changed_somewhere = False
    for before, after in zip(names, names[1:]):
        old, new = _op_histogram(recomputed[(artifact, before)][1]), _op_histogram(recomputed[(artifact, after)][1])
        added = {op for op in new if new[op] > old.get(op, 0)}
        removed = {op for op in old if old[op] > new.get(op, 0)}
        rewrites = report.artifacts[artifact].optimized[after].diff.rewrites
        if not (added or removed):
            continue
        changed_somewhere = True
        assert rewrites, (artifact, after, added, removed)
        lhs = " ".join(r.summary.split("->")[0] for r in rewrites if "->" in r.summary)
        rhs = " ".join(r.summary.split("->", 1)[1] for r in rewrites if "->" in r.summary)
        text = " ".join(r.summary for r in rewrites)
        for op in added:
            assert op.rsplit(".", 1)[-1] in (rhs or text), (artifact, after, op, [r.summary for r in rewrites])
        for op in removed:
            assert op.rsplit(".", 1)[-1] in (lhs or text), (artifact, after, op, [r.summary for r in rewrites])
    # ORT does rewrite each of these files somewhere between disable_all and all
    assert changed_somewhere, artifact


def test_int32_bias_scale_is_input_scale_times_weight_scale_in_the_file(compared):
    report, workdir = compared("conv_relu")
    model = onnx.load(str(workdir / "artifacts" / "ort_qdq.onnx"))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    (conv,) = [n for n in model.graph.node if n.op_type == "Conv"]
    x_dq, w_dq, b_dq = (producer[i] for i in conv.input[:3])
    assert {x_dq.op_type, w_dq.op_type, b_dq.op_type} == {"DequantizeLinear"}
    assert inits[b_dq.input[0]].dtype == np.int32
    s_x = inits[x_dq.input[1]].astype(np.float64)
    s_w = inits[w_dq.input[1]].astype(np.float64)
    s_b = inits[b_dq.input[1]].astype(np.float64)
    np.testing.assert_allclose(s_b, s_x * s_w, rtol=1e-6)
    (bias,) = report.artifacts["ort_qdq"].quantization.bias
    assert bias.scale_matches_input_times_weight is True
    # and the flag is not a constant: the same check on a file whose bias scale is off says False
    from service.pipeline.inspect.inventory import inventory_from_onnx

    inits_by_name = {t.name: t for t in model.graph.initializer}
    inits_by_name[b_dq.input[1]].CopyFrom(numpy_helper.from_array((s_b * 1.5).astype(np.float32), b_dq.input[1]))
    (off,) = inventory_from_onnx(model).bias
    assert off.scale_matches_input_times_weight is False
