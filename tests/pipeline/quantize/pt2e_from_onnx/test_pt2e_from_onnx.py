"""End to end on a small ONNX upload: the converter's module goes through PT2E to a QDQ file that
(1) reports the conversion with its parity figure, (2) names the upload's nodes and tensors on its
own nodes, so a tensor of the upload can be found in the PT2E file and compared with its fp32 value."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pt2e_upload import pt2e_of_upload


@pytest.fixture(scope="module")
def pt2e_from_onnx(tmp_path_factory):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[4]))
    from tests.realworld.corpus import build_opset21_unnamed_batch

    folder = tmp_path_factory.mktemp("pt2e_onnx")
    path = folder / "m.onnx"
    build_opset21_unnamed_batch(path)
    tool, samples = pt2e_of_upload(path, folder / "pt2e.onnx")
    return path, folder / "pt2e.onnx", tool, samples


def test_conversion_is_reported_with_parity(pt2e_from_onnx):
    _, _, tool, _ = pt2e_from_onnx
    conv = tool.conversion
    assert conv["converter"].startswith("quantcompare onnx_torch")
    assert conv["ops"]["Conv"] == 1 and conv["ops"]["Gemm"] == 1
    assert conv["parity"]["feeds"] == 2 and conv["parity"]["ok"] is True
    assert 0 <= conv["max_abs_error_vs_onnx"] < 1e-4


def _sqnr_db(ref, got):
    return 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(np.sum((ref - got).astype(np.float64) ** 2), 1e-30))


def test_pt2e_file_names_upload_tensors(pt2e_from_onnx):
    import onnx
    import onnxruntime as ort
    from onnx import helper

    from service.pipeline.quantize.pt2e_from_onnx.names import upload_tensor_map

    upload, pt2e_path, _, samples = pt2e_from_onnx
    model = onnx.load(str(pt2e_path))
    by_op = {}
    for n in model.graph.node:
        props = {p.key: p.value for p in n.metadata_props}
        if "quantcompare.onnx_op" in props:
            by_op.setdefault(props["quantcompare.onnx_op"], []).append(props)
    assert by_op["Conv"][0]["quantcompare.onnx_node"] == "conv"
    assert by_op["Conv"][0]["quantcompare.onnx_outputs"] == "c"
    mapping = upload_tensor_map(model)
    assert {"c", "r", "p", "y"} <= set(mapping)
    # oracle: the mapped PT2E tensor holds (a quantized approximation of) the upload's fp32 tensor
    feed = samples.evaluation[0]
    ref_model = onnx.load(str(upload))
    ref_model.graph.output.append(helper.make_empty_tensor_value_info("r"))
    ref = ort.InferenceSession(ref_model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["r"], feed)[0]
    model.graph.output.append(helper.make_empty_tensor_value_info(mapping["r"]))
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run([mapping["r"]], feed)[0]
    assert got.shape == ref.shape
    assert _sqnr_db(ref, got) > 20


def test_pt2e_file_of_an_onnx_upload_names_no_server_source(pt2e_from_onnx):
    """torch.onnx writes each node's FX stack trace; for a module converted from ONNX that is the
    converter's frames, paths of the server's checkout included. The file a user downloads carries
    none of it, and keeps the metadata the tensor mapping reads."""
    import onnx

    import service

    _, pt2e_path, tool, _ = pt2e_from_onnx
    model = onnx.load(str(pt2e_path))
    keys = {p.key for n in model.graph.node for p in n.metadata_props}
    gone = {"pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node", "pkg.torch.onnx.class_hierarchy", "namespace"}
    assert not keys & gone, keys & gone
    assert {"pkg.torch.onnx.name_scopes", "quantcompare.onnx_outputs"} <= keys  # what the tensor mapping reads
    server_source = str(Path(service.__file__).resolve().parent)
    assert server_source.encode() not in pt2e_path.read_bytes()
    assert b"service.pipeline" not in pt2e_path.read_bytes()  # nor the converter's class names
    assert any("stack traces" in n for n in tool.conversion["notes"])


def test_input_names_python_folds_refuses_or_chokes_on_keep_their_names_in_the_pt2e_file(tmp_path):
    """'ﬁx' and 'fix' are one identifier after NFKC (SyntaxError: duplicate argument), '²x' is no
    identifier at all, and a long name ran torch.export's unlifting regex for minutes: forward's
    parameters are ASCII and capped; the file's inputs are still the upload's names."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    names = ["\ufb01x", "fix", "\u00b2x", "n" * 3000]
    nodes = [helper.make_node("Add", [names[0], names[1]], ["s"]), helper.make_node("Add", ["s", names[2]], ["t"]),
             helper.make_node("Add", ["t", names[3]], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "m.onnx"))
    _, samples = pt2e_of_upload(tmp_path / "m.onnx", tmp_path / "pt2e.onnx", calibration_samples=4, eval_samples=1)
    session = ort.InferenceSession(str(tmp_path / "pt2e.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == names
    feed = samples.calibration[0]  # inside the calibrated ranges: a wrong wiring, not clipping, would show
    want = sum(feed[n] for n in names)
    assert _sqnr_db(want, session.run(None, feed)[0]) > 20


def _conv_relu(path, dtype):
    from onnx import TensorProto

    from tests import models

    elem = TensorProto.FLOAT16 if dtype == "float16" else TensorProto.FLOAT
    models.save("conv_relu", path, scale=0.2, elem=elem, names=("conv", "relu"))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_float16_upload_gives_a_pt2e_file_ort_loads_like_its_float32_twin(tmp_path, dtype):
    """torch wrote a float16 upload's QDQ file with float16 tensors and float32 scales, which ORT's
    type check refuses (the path failed); the graph is now converted as its float32 copy, behind the
    upload's float16 interface (tests/pipeline/inputs/test_float16_uploads.py has the whole job)."""
    import onnx
    import onnxruntime as ort

    upload = tmp_path / "m.onnx"
    _conv_relu(upload, dtype)
    tool, _ = pt2e_of_upload(upload, tmp_path / "pt2e.onnx", calibration_samples=2)
    assert tool.conversion["parity"]["ok"]
    ort.InferenceSession(str(tmp_path / "pt2e.onnx"), providers=["CPUExecutionProvider"])
    written = onnx.load(str(tmp_path / "pt2e.onnx"))
    uploaded = onnx.load(str(upload))
    assert written.graph.input[0].type.tensor_type.elem_type == uploaded.graph.input[0].type.tensor_type.elem_type
    assert any("float32 copy" in n for n in tool.conversion["notes"]) == (dtype == "float16")


def test_a_pt2e_file_ort_cannot_load_fails_the_path_with_ort_s_reason(tmp_path):
    """What torch wrote for a float16 graph (QuantizeLinear of a float16 tensor with a float32 scale):
    the path fails with ORT's words instead of reporting "ok" with five failed levels."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from service.errors import Pt2eFileRejected
    from service.pipeline.quantize.pt2e import _ort_loads

    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="node_quantize_per_tensor"),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z")])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(Pt2eFileRejected) as info:
        _ort_loads(path)
    assert "node_quantize_per_tensor" in info.value.message and "tensor(float16)" in info.value.message


def test_a_node_onnxscripts_folding_rewrites_keeps_the_upload_s_name(tmp_path):
    """The cleanup's constant folding (onnxscript's optimizer) replaces a Conv whose bias is all zero
    (RemoveOptionalBiasFromConv) by a node named 'node_Conv_0': the PT2E file, the per-tensor table and
    every message then named a node the upload does not have."""
    import onnx

    from tests import models

    models.save("conv_relu", tmp_path / "m.onnx", scale=0.2, bias=np.zeros(4, np.float32), names=("conv", "relu"))
    pt2e_of_upload(tmp_path / "m.onnx", tmp_path / "pt2e.onnx")
    named = [p.value for n in onnx.load(str(tmp_path / "pt2e.onnx")).graph.node for p in n.metadata_props
             if p.key == "quantcompare.onnx_node"]
    assert "conv" in named and not any(v.startswith("node_Conv") for v in named), named
