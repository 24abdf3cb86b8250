"""Convs that read one weight initializer (a siamese branch, or equal weights an exporter merged):
torchao's XNNPACK quantizer skips a conv whose weight node another conv already annotated, so the
converter gives every Conv after the first its own copy, and the PT2E file quantizes every Conv.

The first test pins the torchao rule itself in the installed torchao (the note states it); the
second, that the upload's two Convs both come out quantized; the third, that past the copy limit
the note says which Convs stay float and the file shows it."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pt2e_upload import pt2e_of_upload

RNG = np.random.default_rng(11)


def _dequantized_conv_weights(path) -> tuple[int, int]:
    """(Conv nodes, those whose weight comes out of a DequantizeLinear) in an ONNX file."""
    graph = onnx.load(str(path)).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    convs = [n for n in graph.node if n.op_type == "Conv"]
    return len(convs), sum(producer.get(n.input[1]) == "DequantizeLinear" for n in convs)


def _siamese(path) -> None:
    """Two branches of Conv -> Relu that read one weight (and bias) initializer, added."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x1", "w", "b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["x2", "w", "b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Sub", ["r1", "r2"], ["y"], name="sub")]
    spec = [1, 3, 8, 8]
    graph = helper.make_graph(nodes, "siamese", [helper.make_tensor_value_info("x1", onnx.TensorProto.FLOAT, spec),
                                                 helper.make_tensor_value_info("x2", onnx.TensorProto.FLOAT, spec)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("shared", [True, False])
def test_torchao_quantizes_only_the_first_conv_of_a_shared_weight(shared):
    """The rule the note cites, in the installed torchao: one Conv2d module called twice leaves the
    second call in float, and the PT2E notes name it; two modules with equal weights are both
    quantized (the control)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    class Siamese(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.b = self.a if shared else torch.nn.Conv2d(3, 4, 3, padding=1)
            if not shared:
                self.b.load_state_dict(self.a.state_dict())

        def forward(self, x1, x2):
            return torch.relu(self.a(x1)) - torch.relu(self.b(x2))

    args = (torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8))
    program = torch.export.export(Siamese().eval(), args)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(program.module(), quantizer)
    # what a .pt2 upload's PT2E notes say (the program is the user's: no copy is made there)
    from service.pipeline.quantize.pt2e import _shared_weight_notes

    notes = _shared_weight_notes(prepared)
    assert (len(notes), "(conv2d_1)" in "".join(notes)) == ((1, True) if shared else (0, False))
    prepared(*args)
    gm = convert_pt2e(prepared)
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and "conv2d" in str(n.target)]
    quantized = [n for n in convs if "dequantize" in str(getattr(n.args[1], "target", ""))]
    assert (len(convs), len(quantized)) == ((2, 1) if shared else (2, 2))


@pytest.mark.heavy
def test_every_conv_of_a_shared_weight_upload_is_quantized(tmp_path):
    upload = tmp_path / "siamese.onnx"
    _siamese(upload)
    tool, _ = pt2e_of_upload(upload, tmp_path / "pt2e.onnx", calibration_samples=2, eval_samples=1)
    assert _dequantized_conv_weights(tmp_path / "pt2e.onnx") == (2, 2)
    assert tool.conversion["parity"]["ok"]
    note = next(n for n in tool.conversion["notes"] if "read by several Convs" in n)
    assert note.startswith("2 initializers") and "2 copies" in note
    # the upload itself is untouched: one weight, two readers
    assert [i.name for i in onnx.load(str(upload)).graph.initializer] == ["w", "b"]


def test_past_the_copy_limit_the_convs_keep_sharing_and_the_note_says_so(tmp_path):
    from service.pipeline.quantize.pt2e_from_onnx.own_weights import own_weight_copies

    _siamese(tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    notes: list[str] = []
    assert own_weight_copies(model, notes, limit_bytes=0) == 0
    assert [n.input[1] for n in model.graph.node if n.op_type == "Conv"] == ["w", "w"]
    assert len(notes) == 1 and notes[0].startswith("2 Convs share") and "leaves them in float (b, w)" in notes[0]
    notes.clear()
    assert own_weight_copies(model, notes) == 2
    assert [n.input[1:] for n in model.graph.node if n.op_type == "Conv"] == [["w", "b"], ["w__conv1", "b__conv1"]]


@pytest.mark.heavy
def test_convs_whose_equal_constant_of_shape_weights_folding_merges_are_each_quantized(tmp_path):
    """onnx's light_inception_v1 (caffe2 export, each weight a ConstantOfShape of 0.02): the constant
    folding's common-subexpression pass merged equal ConstantOfShape nodes into one, whose output the
    copy step did not see (not an initializer yet), so torchao quantized 31 of 55 Convs and the note
    told the user to copy.deepcopy a module an ONNX upload does not have. Two such Convs here."""
    shape = numpy_helper.from_array(np.array([4, 4, 3, 3], np.int64), "ws1")
    shape2 = numpy_helper.from_array(np.array([4, 4, 3, 3], np.int64), "ws2")
    fill = numpy_helper.from_array(np.array([0.02], np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["ws1"], ["w1"], value=fill),
             helper.make_node("ConstantOfShape", ["ws2"], ["w2"], value=fill),
             helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "light", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [shape, shape2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    upload = tmp_path / "light.onnx"
    onnx.save(model, str(upload))
    tool, _ = pt2e_of_upload(upload, tmp_path / "pt2e.onnx", calibration_samples=2, eval_samples=1)
    assert _dequantized_conv_weights(tmp_path / "pt2e.onnx") == (2, 2)
    assert not any("read a weight another one reads too" in n for n in tool.notes)
