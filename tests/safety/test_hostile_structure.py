"""Hostile structure (docs/history/notes.md, twentieth pass): graphs that ORT runs but nothing here can compare
honestly, refused at the upload with a code and what to do. Each failed on the old code: a bfloat16 output
was blamed on the model's shapes, a float8 output compared as integers, a model whose outputs read no input
'succeeded' with 139 dB and 'nothing_quantized ()'."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from safety_models import save, tiny_onnx
from service.errors import UnsupportedModel
from service.pipeline.inputs.safety import onnx_model_from_path
from tests import models

F = TensorProto.FLOAT
W = numpy_helper.from_array(np.eye(4, dtype=np.float32), "W")
NO_NUMPY = {"bfloat16": TensorProto.BFLOAT16, "float8e4m3fn": TensorProto.FLOAT8E4M3FN,
            "float8e5m2": TensorProto.FLOAT8E5M2, "int4": TensorProto.INT4, "uint4": TensorProto.UINT4}


def _cast_output(to: int):
    """y = Cast(x @ W, to): ORT's CPU EP has the Cast kernel for each of these types."""
    return tiny_onnx(nodes=[helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Cast", ["h"], ["y"], to=to)],
                     outputs=[helper.make_tensor_value_info("y", to, [1, 4])], initializers=[W], opset=21, ir=10)


@pytest.mark.parametrize("to", NO_NUMPY.values(), ids=list(NO_NUMPY))
def test_ort_s_python_api_returns_no_numbers_for_these_output_types(to):
    """The pin of the refusal's reason: the run itself succeeds, its output cannot be read as numbers."""
    session = ort.InferenceSession(_cast_output(to).SerializeToString(), providers=["CPUExecutionProvider"])
    try:
        (y,) = session.run(None, {"x": np.array([[1.5, -2, 0.25, 3]], np.float32)})
    except RuntimeError as e:
        assert "No corresponding Numpy type" in str(e)
    else:  # float8e4m3fn: its bytes, as uint8
        assert to == TensorProto.FLOAT8E4M3FN and y.dtype == np.uint8


@pytest.mark.parametrize("name,to", NO_NUMPY.items(), ids=list(NO_NUMPY))
def test_an_output_ort_returns_no_numbers_for_is_refused_naming_it(tmp_path, name, to):
    with pytest.raises(UnsupportedModel) as e:
        onnx_model_from_path(save(_cast_output(to), tmp_path / "m.onnx"))
    assert f"Output 'y' is {name}" in e.value.message and "Cast" in e.value.hint


def test_a_sequence_of_bfloat16_outputs_is_refused_too(tmp_path):
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.BFLOAT16, [1, 4]))
    m = tiny_onnx(nodes=[helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
                         helper.make_node("SequenceConstruct", ["b"], ["s"])],
                  outputs=[helper.make_value_info("s", seq)])
    with pytest.raises(UnsupportedModel, match="Output 's' is bfloat16"):
        onnx_model_from_path(save(m, tmp_path / "m.onnx"))


def test_outputs_that_read_no_input_are_refused(tmp_path):
    c = numpy_helper.from_array(np.ones([1, 4], np.float32), "c")
    m = tiny_onnx(nodes=[helper.make_node("MatMul", ["c", "W"], ["y"])], initializers=[W, c])
    with pytest.raises(UnsupportedModel, match=r"No graph output \('y'\) depends on a graph input \('x'\)"):
        onnx_model_from_path(save(m, tmp_path / "m.onnx"))


def test_a_constant_output_beside_a_computed_one_is_taken(tmp_path):
    """A detector's anchors are an output computed from weights alone."""
    c = numpy_helper.from_array(np.ones([1, 4], np.float32), "c")
    m = tiny_onnx(nodes=[helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("MatMul", ["c", "W"], ["anchors"])],
                  outputs=[helper.make_tensor_value_info("y", F, [1, 4]), helper.make_tensor_value_info("anchors", F, [1, 4])],
                  initializers=[W, c])
    onnx_model_from_path(save(m, tmp_path / "m.onnx"))


def test_an_output_computed_in_a_body_from_an_outer_input_is_taken(tmp_path):
    """The If reads x only inside its branches (an implicit input): the output still depends on x."""
    flag = numpy_helper.from_array(np.array(True), "flag")
    m = tiny_onnx(nodes=[helper.make_node("If", ["flag"], ["y"], then_branch=models.branch("Relu", ["x"], "t", [1, 4]),
                                          else_branch=models.branch("Neg", ["x"], "e", [1, 4]))], initializers=[flag])
    onnx_model_from_path(save(m, tmp_path / "m.onnx"))


def _external_w(tmp_path, **keys):
    w = np.eye(4, dtype=np.float32)
    t = numpy_helper.from_array(w, "W")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in {"location": "w.bin", "offset": "0", "length": str(w.nbytes), **keys}.items():
        t.external_data.add(key=k, value=v)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    return save(tiny_onnx(nodes=[helper.make_node("MatMul", ["x", "W"], ["y"])], initializers=[t]), tmp_path / "m.onnx")


@pytest.mark.parametrize("key", ["basepath", "foo"])
def test_ort_refuses_an_external_data_key_it_does_not_read_and_takes_the_file_without_it(tmp_path, key):
    with pytest.raises(Exception, match="model format error!"):
        ort.InferenceSession(str(_external_w(tmp_path, **{key: "x"})), providers=["CPUExecutionProvider"])
    ort.InferenceSession(str(_external_w(tmp_path, checksum="abc")), providers=["CPUExecutionProvider"])


def test_an_unknown_external_data_key_is_refused_naming_it(tmp_path):
    from service.errors import InvalidModel

    with pytest.raises(InvalidModel, match="external data key 'basepath', which ONNX Runtime does not read"):
        onnx_model_from_path(_external_w(tmp_path, basepath="/etc"), allowed_data_files={"w.bin"})
    onnx_model_from_path(_external_w(tmp_path, checksum="abc"), allowed_data_files={"w.bin"})


def _shadowing_relu(domain=""):
    fn = helper.make_function(domain, "Relu", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    m = tiny_onnx(nodes=[helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"], domain=domain)],
                  initializers=[W])
    m.functions.append(fn)
    if domain:
        m.opset_import.append(helper.make_opsetid(domain, 1))
    return m


def test_ort_runs_the_operator_and_onnx_s_inliner_the_function_that_shadows_it():
    from onnx import inliner

    m = _shadowing_relu()
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)})[0]
    np.testing.assert_array_equal(y, [[0.0, 2.0, 0.0, 4.0]])  # Relu, not Neg
    assert [n.op_type for n in inliner.inline_local_functions(m).graph.node] == ["MatMul", "Neg"]


def test_a_function_named_like_an_operator_of_its_domain_is_refused_and_one_in_its_own_domain_taken(tmp_path):
    from service.errors import InvalidModel

    with pytest.raises(InvalidModel, match="Model-local function 'Relu' is in domain 'ai.onnx'"):
        onnx_model_from_path(save(_shadowing_relu(), tmp_path / "m.onnx"))
    onnx_model_from_path(save(_shadowing_relu("local"), tmp_path / "ok.onnx"))


def test_a_function_standing_in_for_an_operator_of_a_later_opset_is_not_called_ambiguous(tmp_path):
    """Gelu became an operator at opset 20: at opset 17 a local 'Gelu' has one meaning. (onnx's full checker
    refuses a default-domain function that names no registered operator anyway; the API's pre-check does not
    run it.)"""
    from service.pipeline.inputs.safety import check_onnx_model

    fn = helper.make_function("", "Gelu", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])], [helper.make_opsetid("", 17)])
    m = tiny_onnx(nodes=[helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Gelu", ["h"], ["y"])],
                  initializers=[W], opset=17)
    m.functions.append(fn)
    check_onnx_model(m, model_dir=None, structural_check=False)
