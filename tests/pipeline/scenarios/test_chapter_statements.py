"""Statements issue 14 found wrong, each pinned with an oracle that is the file itself or ORT's
saved graph (read here with plain onnx / numpy), never the report's own other fields."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def _inits(path):
    m = onnx.load(str(path))
    return m, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def test_qoperator_matmul_weight_axis_is_the_one_its_scales_run_along(compared):
    report, workdir = compared("op_zoo_net")
    inv = report.artifacts["ort_qoperator"].quantization
    m, inits = _inits(workdir / "artifacts" / "ort_qoperator.onnx")
    _, fp32 = _inits(workdir / "artifacts" / "fp32.onnx")
    checked = 0
    for node in m.graph.node:
        if node.op_type not in ("QLinearMatMul", "QGemm"):
            continue
        w_name, s_name, z_name = node.input[3], node.input[4], node.input[5]
        t = next(t for t in inv.tensors if t.name == w_name)
        w, s, z = inits[w_name].astype(np.float32), inits[s_name], inits[z_name]
        if s.size == 1:
            continue
        shape = [1] * w.ndim
        shape[t.axis] = -1
        deq = (w - z.reshape(shape)) * s.reshape(shape)
        ref = next(v for k, v in fp32.items() if v.shape == w.shape or v.T.shape == w.shape)
        ref = ref if ref.shape == w.shape else ref.T
        assert np.abs(deq - ref).max() < 0.05, (w_name, t.axis)
        checked += 1
    assert checked


def test_qoperator_inventory_counts_ops_reading_8bit_tensors_as_quantized(compared):
    report, workdir = compared("op_zoo_net")
    inv = report.artifacts["ort_qoperator"].quantization
    m = onnx.load(str(workdir / "artifacts" / "ort_qoperator.onnx"))
    producer = {o: n for n in m.graph.node for o in n.output}
    from collections import Counter

    kinds = ("MaxPool", "Reshape", "Transpose")
    on_8bit = Counter(n.op_type for n in m.graph.node if n.op_type in kinds
                      and n.input[0] in producer and (producer[n.input[0]].op_type == "QuantizeLinear"
                                                     or producer[n.input[0]].op_type.startswith("QLinear")))
    assert on_8bit
    every = Counter(n.op_type for n in m.graph.node if n.op_type in kinds)
    for op in on_8bit:
        # a reader of a Q / QLinear output runs on 8-bit data, and so does what reads it in turn
        assert inv.ops_quantized.get(op, 0) >= on_8bit[op]
        assert inv.ops_quantized.get(op, 0) + inv.ops_float.get(op, 0) == every[op]
    # op_zoo_net's Transpose after the float Sub -> Reshape reads a float tensor: float, whatever Q follows
    assert inv.ops_float.get("Transpose") == 1
    assert inv.ops_float_reasons["Transpose"] == "output is quantized but the inputs are float"


def test_reasons_below_extended_name_the_level_not_s8_to_u8(compared):
    report, _ = compared("op_zoo_net")
    for art in ("ort_qdq", "pt2e_qdq"):
        for level in ("disable_all", "basic"):
            ol = report.artifacts[art].optimized[level]
            assert "QDQS8ToU8" not in " ".join(ol.ops_float_reasons.values())
            conv = [r for r in ol.unfused if r.op_type in ("Conv", "Relu")]
            assert conv and {r.blocker for r in conv} == {"fusion_starts_at_extended"}


def test_pt2e_conv_relu_q_is_one_unit_not_no_q_after_it(compared, tmp_path):
    """The file has Conv -> Relu -> Q: ORT's selector takes the Relu into the Conv's unit."""
    report, workdir = compared("op_zoo_net")
    m = onnx.load(str(workdir / "artifacts" / "pt2e_qdq.onnx"))
    readers = {}
    for n in m.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    conv_relu_q = [n for n in m.graph.node if n.op_type == "Conv" and [c.op_type for c in readers.get(n.output[0], [])] == ["Relu"]
                   and [c.op_type for c in readers.get(readers[n.output[0]][0].output[0], [])] == ["QuantizeLinear"]]
    assert conv_relu_q
    for level, ol in report.artifacts["pt2e_qdq"].optimized.items():
        rows = {r.node: r for r in ol.unfused}
        for n in conv_relu_q:
            assert rows.get(n.name) is None or rows[n.name].blocker != "no_q_on_output", level


def test_bn_folding_in_pt2e_is_credited_to_prepare_pt2e(compared):
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    from service.examples import EXAMPLES

    program = torch.export.export(EXAMPLES["tiny_conv_net"].factory(), (torch.randn(2, 3, 16, 16),))
    bn = lambda gm: sum("batch_norm" in str(n.target) for n in gm.graph.nodes)  # noqa: E731
    prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    assert bn(program) == 1 and bn(prepared) == 0  # the oracle: prepare_pt2e itself folds it
    report, _ = compared("tiny_conv_net")
    row = next(r for r in report.decisions if r.decision == "Conv+BatchNorm folding")
    assert row.where["pt2e_qdq"] == "before quantization (prepare_pt2e)"
    assert row.where["ort_qdq"] == "before quantization (torch.onnx.export)"


def test_qdq_drop_names_the_dtype_the_op_reads_in_the_saved_graph(compared):
    report, workdir = compared("op_zoo_net")
    m = onnx.load(str(workdir / "artifacts" / "ort_qdq.extended.onnx"))
    zp = {t.name: t.data_type for t in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    drops = [r for r in report.artifacts["ort_qdq"].optimized["extended"].diff.rewrites if r.kind == "qdq_drop"]
    assert drops
    names = {onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT8: "int8"}
    for n in m.graph.node:
        if n.op_type in ("MaxPool", "Reshape", "Transpose") and producer.get(n.input[0]) is not None \
                and producer[n.input[0]].op_type == "QuantizeLinear":
            dtype = names[zp[producer[n.input[0]].input[2]]]
            assert any(f"around {n.op_type} (runs on {dtype})" in r.summary for r in drops), n.op_type


def test_platform_notes_quote_the_chapter_word_for_word(compared):
    """Oracle: the chapter's text (shared/seeds). Every note either quotes it exactly or says the
    chapter has nothing on the topic; no note puts sdot/udot or 'not measured on arm64' in its mouth."""
    import glob
    import pathlib

    from service.pipeline.verdict.platform_notes import NOT_IN_CHAPTER

    # shared/ sits beside the checkout (CI lays a copy there); /work/shared on a developer's machine.
    repo = pathlib.Path(__file__).resolve().parents[3]
    seeds = glob.glob(str(repo.parent / "shared" / "seeds" / "*.txt")) or glob.glob("/work/shared/seeds/*.txt")
    if not seeds:
        import pytest

        pytest.skip("the chapter text is not on this machine")
    chapter = "".join(open(p, encoding="utf-8").read() for p in seeds)
    report, _ = compared("op_zoo_net")
    assert report.platform
    for note in report.platform:
        if note.chapter == NOT_IN_CHAPTER:
            continue
        quote = note.chapter.split(" / ")[0]
        for part in quote.replace("）", "）\n").splitlines():
            assert part.strip() in chapter, (note.topic, part)
        assert "sdot" not in note.chapter and "not measured on arm64" not in note.chapter
    assert "sdot" not in chapter and "udot" not in chapter


def test_int8_allowed_coverage_is_reported_where_it_differs(compared):
    """The largest x86 difference on op_zoo_net: coverage here vs with int8 allowed, both measured."""
    report, _ = compared("op_zoo_net")
    note = next(n for n in report.platform if n.topic == "activation dtype")
    measured = [a for a in report.advice_refuted + report.advice
                if a.change == {"session": {"session.qdqisint8allowed": "1"}} and a.measured
                and a.artifact in ("pt2e_qdq", "ort_qdq")]
    assert {a.artifact for a in measured} == {"pt2e_qdq", "ort_qdq"}
    for a in measured:
        assert a.measured.after.int8_coverage > a.measured.before.int8_coverage
        assert any(f"int8 coverage {a.measured.before.int8_coverage:.2f} here, "
                   f"{a.measured.after.int8_coverage:.2f} with session.qdqisint8allowed=1" in e for e in note.evidence)


def test_the_report_says_the_symbolic_batch_ran_at_one_size(compared):
    report, workdir = compared("op_zoo_net")
    m = onnx.load(str(workdir / "artifacts" / "ort_qdq.onnx"))
    dim = m.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param  # the oracle: the file keeps a symbolic batch
    lint = next(x for x in report.lints if x.code == "symbolic_dims_measured_at_one_size")
    assert f"'{dim.dim_param}' = 1" in lint.message


def test_every_op_ort_runs_on_dequantized_input_is_in_ops_float_concat_included(compared):
    """Oracle: ORT's saved graph; a node reading a DequantizeLinear output runs in float, data movement or not."""
    from collections import Counter

    report, workdir = compared("op_zoo_net")
    for art in ("pt2e_qdq", "ort_qdq"):
        m = onnx.load(str(workdir / "artifacts" / f"{art}.all.onnx"))
        producer = {o: n for n in m.graph.node for o in n.output}
        raw = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in m.graph.node
                      if n.op_type not in ("QuantizeLinear", "DequantizeLinear", "ReorderInput")  # ORT's NCHWc plumbing
                      and any(i in producer and producer[i].op_type == "DequantizeLinear" for i in n.input))
        ops_float = report.artifacts[art].optimized["all"].ops_float
        for op, n in raw.items():
            assert ops_float.get(op, 0) >= n, (art, op)


def test_attribution_names_no_transformer_it_refutes(compared, tmp_path):
    """op_zoo_net's ort_qoperator: MaxPool -> NhwcMaxPool already happens at extended. Oracle: ORT with
    NhwcTransformer switched off still writes NhwcMaxPool there, so NhwcTransformer (a layout-level
    pass) must not be credited at extended; and no rewrite names a transformer attribution refuted."""
    import onnxruntime as ort

    from service.pipeline.ort.sessions import session_options_for

    report, workdir = compared("op_zoo_net", attribution=True)
    out = tmp_path / "ext.onnx"
    so = session_options_for("extended", optimized_model_path=out, disabled_optimizers=["NhwcTransformer"])
    ort.InferenceSession(str(workdir / "artifacts" / "ort_qoperator.onnx"), so, providers=["CPUExecutionProvider"])
    still = any(n.op_type == "NhwcMaxPool" for n in onnx.load(str(out)).graph.node)
    ext = report.artifacts["ort_qoperator"].optimized["extended"].diff
    nhwc = [r for r in ext.rewrites if "NhwcMaxPool" in r.summary]
    assert still  # made at extended by something other than NhwcTransformer
    assert nhwc and all(r.transformer != "NhwcTransformer" for r in nhwc)
    for art in report.artifacts.values():
        for ol in (art.optimized or {}).values():
            for r in (ol.diff.rewrites if ol.diff else []):
                if r.confirmed is False:
                    assert r.transformer is None, r


def test_the_symbolic_dim_hint_does_not_ask_for_shapes_the_user_gave():
    """Every run with input_shapes set was told "set options.input_shapes", and that latency and
    advice ran at that size when both were off."""
    from service.pipeline.verdict.lints import symbolic_dim_lints as _symbolic_dim_lints
    from service.pipeline.inputs.specs import InputSpec
    from service.schemas.options import ComparisonOptions

    specs = [InputSpec(name="x", dtype="float32", shape=("batch", 3, "h", "w"))]
    shapes = {"x": (1, 3, 64, 64)}
    given = ComparisonOptions.model_validate({"input_shapes": {"x": [1, 3, 64, 64]}, "latency": {"enabled": False},
                                              "advice": {"enabled": False}})
    lint, = _symbolic_dim_lints(specs, shapes, given)
    assert "calibration, evaluation ran with x[0] 'batch' = 1" in lint.message and "latency" not in lint.message
    assert "set options.input_shapes" not in lint.hint and "a job per size" in lint.hint
    lint, = _symbolic_dim_lints(specs, shapes, ComparisonOptions())
    assert "latency, advice ran with" in lint.message and lint.hint.startswith("set options.input_shapes")
