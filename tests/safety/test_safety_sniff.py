"""Uploads are sniffed by content: every non-model gets invalid_model with a message that says what it is."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
import zipfile

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from safety_models import conv_onnx, save, write_members
from service.errors import InvalidModel, UnsupportedModel
from service.pipeline.inputs.safety import sniff_model_format


def _bytes(tmp_path, data: bytes, name="upload.onnx"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_a_valid_onnx_model_is_onnx_whatever_its_name(tmp_path):
    assert sniff_model_format(save(conv_onnx(), tmp_path / "model.pt2")) == "onnx"


def test_a_torch_export_archive_is_pt2_whatever_its_name(tmp_path, good_pt2):
    p = tmp_path / "model.onnx"
    p.write_bytes(good_pt2.read_bytes())
    assert sniff_model_format(p) == "pt2"


def test_pt2_uploads_can_be_turned_off(good_pt2):
    with pytest.raises(UnsupportedModel) as e:
        sniff_model_format(good_pt2, allow_pt2=False)
    assert e.value.code == "unsupported_model" and e.value.details["reason"] == "pt2_disabled"


def _torchscript_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("net/data.pkl", pickle.dumps({}))
        zf.writestr("net/constants.pkl", pickle.dumps(()))
        zf.writestr("net/code/__torch__/net.py", "def forward(self, x): return x\n")
        zf.writestr("net/version", "3")
    return buf.getvalue()


def _checkpoint_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"w": 1}))
        zf.writestr("archive/version", "3")
    return buf.getvalue()


def _plain_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("readme.txt", "hello")
    return buf.getvalue()


def _zip_with_onnx() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("model.onnx", conv_onnx().SerializeToString())
        zf.writestr("model.onnx.data", b"\0" * 16)
    return buf.getvalue()


def _tar(gz: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tf:
        data = conv_onnx().SerializeToString()
        info = tarfile.TarInfo("model.onnx")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _graph_proto() -> bytes:
    return conv_onnx().graph.SerializeToString()


def _tensor_proto() -> bytes:
    return numpy_helper.from_array(np.ones((4, 4), np.float32), "t").SerializeToString()


CASES = {
    "an empty file": (b"", "empty"),
    "random bytes": (np.random.default_rng(1).bytes(4096), "not an ONNX model"),
    "a pickle": (pickle.dumps({"state_dict": [1, 2, 3]}, protocol=4), "pickle"),
    "a torch.jit.save archive": (_torchscript_zip(), "TorchScript"),
    "a torch.save checkpoint": (_checkpoint_zip(), "torch.save checkpoint"),
    "a zip that is not a torch.export archive": (_plain_zip(), "not a torch.export archive"),
    "a zip of model + data": (_zip_with_onnx(), "zip archive holding an ONNX model"),
    "a tar of model + data": (_tar(False), "tar archive"),
    "a tar.gz of model + data": (_tar(True), "gzip"),
    "a truncated protobuf": (conv_onnx().SerializeToString()[:-40], "not an ONNX model"),
    "a GraphProto alone": (_graph_proto(), "not an ONNX ModelProto"),
    "a TensorProto alone": (_tensor_proto(), "not an ONNX ModelProto"),
}


@pytest.mark.parametrize("data,needle", CASES.values(), ids=list(CASES))
def test_refused_with_invalid_model_and_a_clear_message(tmp_path, data, needle):
    p = _bytes(tmp_path, data)
    with pytest.raises(InvalidModel) as e:
        sniff_model_format(p)
    assert e.value.code == "invalid_model"
    assert needle in e.value.message
    assert e.value.hint
    assert str(tmp_path) not in str(e.value) and os.sep + "tmp" not in e.value.message


def test_a_graph_proto_is_named_as_such(tmp_path):
    with pytest.raises(InvalidModel, match="GraphProto"):
        sniff_model_format(_bytes(tmp_path, _graph_proto()))


def test_a_model_saved_by_onnx_save_is_onnx(tmp_path):
    p = tmp_path / "m"
    onnx.save(conv_onnx(), p)
    assert sniff_model_format(p) == "onnx"
