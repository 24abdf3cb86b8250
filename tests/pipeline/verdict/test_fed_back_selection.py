"""A Loop that feeds the index its ArgMax picks back into its next iteration (greedy decoding, as
PaddleOCR's SLANet table decoder does for 501 steps): once a file picks another index at one step,
every later step decodes another sequence. SLANet's ort_qdq read 0.3 dB over its whole output with
no word: 48 dB per step up to step 24, then a flip (fp32's top-2 gap 0.35) and -3 dB on every
step after it. The lint reads the graph (what the body carries into its next iteration), no ORT
behaviour; a Loop whose ArgMax only feeds a scan output gets none."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from service.pipeline.verdict.lints import fed_back_selection_lints

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _decoder(*, fed_back: bool, emb: np.ndarray | None = None):
    """h0 -> for 6 steps: logits = (h + E[tok]) @ W, tok' = argmax(logits); scan logits."""
    rng = np.random.default_rng(3)
    e = rng.normal(0, 1, (5, 4)).astype(np.float32) if emb is None else emb
    w = rng.normal(0, 1, (4, 5)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["E", "tok_in"], ["e_t"]),
             helper.make_node("Add", ["h", "e_t"], ["x_t"]),
             helper.make_node("MatMul", ["x_t", "W"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["pick"], axis=1, keepdims=0),
             helper.make_node("Identity", ["c_in"], ["c_out"])]
    nodes.append(helper.make_node("Identity", ["pick" if fed_back else "tok_in"], ["tok_out"]))
    body = helper.make_graph(nodes, "step",
                             [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("tok_in", I64, [1])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("tok_out", I64, [1]),
                              helper.make_tensor_value_info("logits", F32, [1, 5]),
                              helper.make_tensor_value_info("pick", I64, [1])])
    loop = helper.make_node("Loop", ["M", "cond", "tok0"], ["tok_last", "all_logits", "picks"], name="decode", body=body)
    graph = helper.make_graph([loop], "g", [helper.make_tensor_value_info("h", F32, [1, 4])],
                              [helper.make_tensor_value_info("all_logits", F32, [6, 1, 5]),
                               helper.make_tensor_value_info("picks", I64, [6, 1])],
                              [numpy_helper.from_array(np.array(6, np.int64), "M"),
                               numpy_helper.from_array(np.array(True), "cond"),
                               numpy_helper.from_array(np.array([0], np.int64), "tok0"),
                               numpy_helper.from_array(e, "E"), numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, e


def test_a_loop_that_feeds_its_argmax_back_gets_the_lint():
    lints = fed_back_selection_lints(_decoder(fed_back=True)[0])
    assert [l.code for l in lints] == ["fed_back_selection"]
    assert "'decode'" in lints[0].message and "ArgMax" in lints[0].message
    assert "'all_logits'" in lints[0].message and "'picks'" in lints[0].message


def test_an_argmax_that_only_feeds_a_scan_output_gets_none():
    assert fed_back_selection_lints(_decoder(fed_back=False)[0]) == []
