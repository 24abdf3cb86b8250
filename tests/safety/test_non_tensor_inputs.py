"""A graph input that is not a tensor (an optional, a sequence) is refused with what to do: the
refusal had no hint at all, though for an input no node reads the fix is to remove it (ORT itself
loads and runs such a model)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, save

from service.errors import UnsupportedModel


def _with_optional_input(path, *, read: bool):
    gain = helper.make_value_info("maybe_gain", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [1])))
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    if read:
        nodes += [helper.make_node("OptionalGetElement", ["maybe_gain"], ["g"]), helper.make_node("Mul", ["r", "g"], ["y"])]
    else:
        nodes += [helper.make_node("Identity", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]), gain],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    save(model, str(path))
    return path


@pytest.mark.parametrize("read", [False, True], ids=["unused", "read by a node"])
def test_a_non_tensor_input_is_refused_with_a_hint_that_fits(tmp_path, read):
    from service.pipeline.inputs.safety import onnx_model_from_path

    path = _with_optional_input(tmp_path / "opt.onnx", read=read)
    if not read:  # ORT runs it: the input is simply unused
        out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((1, 4), np.float32)})
        assert out[0].shape == (1, 4)
    with pytest.raises(UnsupportedModel, match="Input 'maybe_gain' is not a tensor") as e:
        onnx_model_from_path(path)
    assert e.value.hint
    if read:
        assert "export it present, as a tensor" in e.value.hint and "no node reads it" not in e.value.message
    else:
        assert "no node reads it" in e.value.message and "Remove the unused input" in e.value.hint
