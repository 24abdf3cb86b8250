"""Done-when of issue 14 on the YOLO-style example (shared activations, SiLU = x*sigmoid(x), concat).

The oracle for each float node is ORT itself: the graph it saved, read here with plain ``onnx``
(zero-point dtypes, producers, readers), and a counterfactual session where ORT's own switch for
the blocker's condition is flipped (``session.qdqisint8allowed=1``)."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest

from service.pipeline.environment import cpu_info
from service.pipeline.ort.sessions import session_options_for

pytestmark = [pytest.mark.heavy,
              pytest.mark.skipif(cpu_info().arch in ("aarch64", "arm64"), reason="x86 conditions")]
DTYPE_CODES = {"io_dtype_mismatch", "int8_activation_on_x86"}


def _raw(path):
    m = onnx.load(str(path))
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}
    readers = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    zp_type = {t.name: t.data_type for t in g.initializer}
    return g, producer, readers, zp_type


def _float_after_int8_allowed(path, tmp_path) -> set[str]:
    out = tmp_path / f"{path.stem}.int8allowed.onnx"
    so = session_options_for("extended", optimized_model_path=out)
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    g, producer, _, _ = _raw(out)
    return {n.name for n in g.node if any(i in producer and producer[i].op_type == "DequantizeLinear"
                                          for i in n.input)}


@pytest.mark.parametrize("artifact", ["ort_qdq", "pt2e_qdq"])
def test_blockers_agree_with_ort_saved_graphs_for_95_percent_of_float_nodes(compared, tmp_path, artifact):
    report, workdir = compared("yolo_style")
    rows = report.artifacts[artifact].optimized["extended"].unfused
    saved = workdir / "artifacts" / f"{artifact}.extended.onnx"
    g, producer, readers, zp_type = _raw(saved)
    # every node ORT left between a DQ and the rest of the graph has a row
    float_nodes = {n.name for n in g.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
                   and any(i in producer and producer[i].op_type == "DequantizeLinear" for i in n.input)}
    assert float_nodes <= {r.node for r in rows}
    still_float = _float_after_int8_allowed(workdir / "artifacts" / f"{artifact}.onnx", tmp_path)
    by_name = {n.name: n for n in g.node}
    agree = 0
    for r in rows:
        n = by_name[r.node]
        dq_in = [producer[i] for i in n.input if i in producer and producer[i].op_type == "DequantizeLinear"]
        q_out = [c for o in n.output for c in readers.get(o, []) if c.op_type == "QuantizeLinear"]
        in_types = {zp_type.get(d.input[2]) for d in dq_in if d.input[0] not in zp_type}
        out_types = {zp_type.get(q.input[2]) for q in q_out}
        if r.blocker == "io_dtype_mismatch":
            ok = len(in_types | out_types) > 1 and r.node not in still_float
        elif r.blocker == "int8_activation_on_x86":
            ok = in_types | out_types == {onnx.TensorProto.INT8} and r.node not in still_float
        elif r.blocker == "no_q_on_output":
            ok = len(q_out) < sum(len(readers.get(o, [])) for o in n.output) and r.node in still_float
        elif r.blocker == "input_not_quantized":
            ok = len(dq_in) < len([i for i in n.input if i]) and r.node in still_float
        else:
            ok = r.node in still_float
        agree += ok
    assert rows and agree / len(rows) >= 0.95, (agree, len(rows))
    assert not [r for r in rows if r.blocker == "unexplained"]


def test_qdq_fusion_starts_at_extended_on_every_quantized_node(compared):
    report, _ = compared("yolo_style")
    for level in ("disable_all", "basic"):
        rows = report.artifacts["ort_qdq"].optimized[level].unfused
        assert rows and {r.blocker for r in rows} == {"fusion_starts_at_extended"}


def test_uint8_activation_advice_is_measured_on_the_yolo_model(compared):
    report, _ = compared("yolo_style")
    u8 = [a for a in report.advice + report.advice_refuted if a.artifact == "ort_qdq"
          and a.change.get("ort", {}).get("activation_type") == "uint8"]
    assert u8, [(a.change, a.reason) for a in report.advice_refuted]
    m = u8[0].measured
    assert m is not None and m.before.latency_ms and m.after.latency_ms
    assert m.after.int8_coverage > m.before.int8_coverage
    if u8[0].adopted:
        assert m.after.latency_ms < m.before.latency_ms
    else:
        # Adopting it is a timing decision: on a machine loaded by other work (a fresh-clone CI beside
        # the corpus) the alternated pairs can miss the 11% margin. Only that may refute it.
        assert "refuted: not" in u8[0].reason and "faster (median" in u8[0].reason, u8[0].reason


def test_refuted_candidates_are_never_proposed(compared):
    report, _ = compared("yolo_style")
    proposed = [a.change for a in report.advice]
    assert {"session": {"session.qdqisint8allowed": "1"}} not in proposed
    assert {"ort": {"extra_options": {"DedicatedQDQPair": True}}} not in proposed
    dedicated = [a for a in report.advice_refuted if "DedicatedQDQPair" in str(a.change)]
    # ORT's CSE merges the dedicated pairs back: coverage does not move
    assert dedicated and dedicated[0].measured.after.int8_coverage == dedicated[0].measured.before.int8_coverage


def test_cli_and_page_show_blockers_grouped_and_advice_as_before_after(compared):
    from service.render.page import build_view
    from service.render.text import summary_table

    report, _ = compared("yolo_style")
    text = summary_table(report)
    conv = [ln for ln in text.splitlines() if ln.strip().split(" ")[1:2] == ["Conv:"] and "stays int8" in ln]
    assert conv and all("-> quantize activations as uint8 on x86" in ln for ln in conv)
    assert "advice (re-run and measured):" in text
    adv = report.advice[0].measured
    assert f"{adv.before.latency_ms:.2f} -> {adv.after.latency_ms:.2f}" in text
    view = build_view(report.model_dump(mode="json"), [], "job")
    groups = {g["artifact"]: g for g in view["why"]["groups"]}
    total = sum(x["count"] for x in groups["ort_qdq"]["groups"])
    assert total == len(report.artifacts["ort_qdq"].optimized["all"].unfused)
