"""A .zip / .tar(.gz) of model + external data is extracted flat, bounded, with no links or traversal."""

from __future__ import annotations

import io
import tarfile
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from safety_models import tiny_onnx
from service.errors import BudgetExceeded, UnsafeArchive
from service.pipeline.inputs.safety import Budgets, onnx_model_from_path, safe_extract_archive


def _model_with_data() -> tuple[bytes, bytes]:
    arr = np.arange(16, dtype=np.float32).reshape(1, 16)
    t = numpy_helper.from_array(arr, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "model.onnx.data"), ("offset", "0"), ("length", str(arr.nbytes))):
        t.external_data.add(key=k, value=v)
    m = tiny_onnx(nodes=[helper.make_node("MatMul", ["x", "w"], ["y"])],
                  inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                  outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], initializers=[t])
    return m.SerializeToString(), arr.tobytes()


def _zip(tmp_path, members: dict[str, bytes], name="up.zip", compress=zipfile.ZIP_DEFLATED):
    p = tmp_path / name
    with zipfile.ZipFile(p, "w", compression=compress) as zf:
        for n, d in members.items():
            zf.writestr(n, d)
    return p


def _tar(tmp_path, members: list[tarfile.TarInfo | tuple[str, bytes]], gz=True):
    p = tmp_path / ("up.tar.gz" if gz else "up.tar")
    with tarfile.open(p, "w:gz" if gz else "w") as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tf.addfile(info, io.BytesIO(m[1]))
    return p


def _dest(tmp_path):
    d = tmp_path / "job" / "model"
    d.mkdir(parents=True)
    return d


@pytest.mark.parametrize("kind", ["zip", "tar.gz", "tar"])
def test_model_plus_data_is_extracted_and_loads_with_its_data(tmp_path, kind):
    model, data = _model_with_data()
    members = {"net/model.onnx": model, "net/model.onnx.data": data}
    up = _zip(tmp_path, members) if kind == "zip" else _tar(tmp_path, list(members.items()), gz=kind == "tar.gz")
    dest = _dest(tmp_path)
    onnx_path = safe_extract_archive(up, dest)
    assert onnx_path == dest / "model.onnx"
    files = {p.name for p in dest.iterdir()} - {onnx_path.name}
    assert files == {"model.onnx.data"}
    loaded = onnx_model_from_path(onnx_path, allowed_data_files=files)
    # the weight that came back is the one that went in (read from the extracted data file)
    (w,) = [numpy_helper.to_array(t, base_dir=str(dest)) for t in loaded.graph.initializer if t.name == "w"]
    np.testing.assert_array_equal(w, np.frombuffer(data, dtype=np.float32).reshape(1, 16))


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


HOSTILE_TARS = {
    "a symlink to /etc/passwd": [("model.onnx", b"x"), _link("model.onnx.data", "/etc/passwd")],
    "a hard link out of the folder": [("model.onnx", b"x"), _link("model.onnx.data", "../../secret", tarfile.LNKTYPE)],
    "a .. member": [("model.onnx", b"x"), ("../../evil.onnx.data", b"x")],
    "an absolute member": [("model.onnx", b"x"), ("/tmp/evil", b"x")],
    "a device node": [("model.onnx", b"x"), _link("dev", "", tarfile.CHRTYPE)],
    "two models": [("a.onnx", b"x"), ("b.onnx", b"x")],
    "no model": [("readme.txt", b"x")],
}


@pytest.mark.parametrize("members", HOSTILE_TARS.values(), ids=list(HOSTILE_TARS))
def test_hostile_tar_is_refused_and_leaves_nothing_behind(tmp_path, members):
    dest = _dest(tmp_path)
    with pytest.raises(UnsafeArchive):
        safe_extract_archive(_tar(tmp_path, members), dest)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "evil.onnx.data").exists()


def test_zip_with_traversal_is_refused(tmp_path):
    dest = _dest(tmp_path)
    with pytest.raises(UnsafeArchive):
        safe_extract_archive(_zip(tmp_path, {"model.onnx": b"x", "../../x.data": b"x"}), dest)
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("name", ["../model.onnx.data", "./model.onnx.data", "net/../model.onnx.data"])
def test_a_dot_or_dotdot_component_is_refused_even_one_level_up(tmp_path, name):
    """One '..' above the folder is within the two-part limit: the '..' check itself must refuse it."""
    model, data = _model_with_data()
    dest = _dest(tmp_path)
    with pytest.raises(UnsafeArchive) as e:
        safe_extract_archive(_zip(tmp_path, {"model.onnx": model, name: data}), dest)
    assert "'..'" in e.value.message or "nested" in e.value.message
    assert list(dest.iterdir()) == [] and not (tmp_path / "job" / "model.onnx.data").exists()


def test_zip_bomb_is_refused_while_writing(tmp_path):
    dest = _dest(tmp_path)
    up = _zip(tmp_path, {"model.onnx": b"x", "model.onnx.data": b"\0" * (256 << 20)})
    assert up.stat().st_size < 1 << 20
    with pytest.raises(BudgetExceeded, match="max_compression_ratio"):
        safe_extract_archive(up, dest)
    assert list(dest.iterdir()) == []


def test_too_many_members_is_refused(tmp_path):
    members = {"model.onnx": b"x", **{f"d{i}.bin": b"x" for i in range(20)}}
    with pytest.raises(BudgetExceeded, match="max_archive_members"):
        safe_extract_archive(_zip(tmp_path, members), _dest(tmp_path), budgets=Budgets(max_archive_members=10))


def _pax_header_tar(tmp_path, value_bytes: int):
    """A gzipped tar whose one member carries a pax header of ``value_bytes`` (compresses to little)."""
    model, _ = _model_with_data()
    p = tmp_path / "pax.tar.gz"
    with tarfile.open(p, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("model.onnx")
        info.size = len(model)
        info.pax_headers = {"comment": "a" * value_bytes}
        tf.addfile(info, io.BytesIO(model))
    return p


def test_a_huge_pax_header_is_refused_before_tarfile_reads_it(tmp_path):
    up = _pax_header_tar(tmp_path, 64 << 20)
    assert up.stat().st_size < 1 << 20  # 64 MiB of header in a small upload
    with pytest.raises(UnsafeArchive, match="extended header"):
        safe_extract_archive(up, _dest(tmp_path))


def test_a_small_pax_header_is_what_real_tars_have_and_is_taken(tmp_path):
    safe_extract_archive(_pax_header_tar(tmp_path, 100), _dest(tmp_path))


def test_directory_entries_count_against_the_member_budget(tmp_path):
    """A tar of folder headers only was read to its end, every header kept in tarfile's list."""
    dirs = []
    for i in range(50):
        d = tarfile.TarInfo(f"d{i}")
        d.type = tarfile.DIRTYPE
        dirs.append(d)
    up = _tar(tmp_path, [*dirs, ("model.onnx", b"x")])
    with pytest.raises(BudgetExceeded, match="max_archive_members"):
        safe_extract_archive(up, _dest(tmp_path), budgets=Budgets(max_archive_members=10))


APPLE_DOUBLE = b"\x00\x05\x16\x07" + b"\x00" * 78  # the header of a ._<file> resource fork


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_what_macos_finder_adds_is_skipped_and_the_model_is_taken(tmp_path, kind):
    """Finder's Compress writes __MACOSX/<folder>/._<file> and .DS_Store: the archive was refused as nested
    folders (and a ._model.onnx would have been a second .onnx); twentieth pass."""
    model, data = _model_with_data()
    members = {"net/model.onnx": model, "net/model.onnx.data": data, "net/.DS_Store": b"\x00" * 64,
               "__MACOSX/net/._model.onnx": APPLE_DOUBLE, "__MACOSX/net/._model.onnx.data": APPLE_DOUBLE,
               "._model.onnx": APPLE_DOUBLE}
    archive = _zip(tmp_path, members) if kind == "zip" else _tar(tmp_path, list(members.items()))
    dest = _dest(tmp_path)
    onnx_path = safe_extract_archive(archive, dest)
    assert onnx_path.name == "model.onnx"
    assert sorted(p.name for p in dest.iterdir()) == ["model.onnx", "model.onnx.data"]
    onnx_model_from_path(onnx_path, allowed_data_files={"model.onnx.data"})


def test_a_member_nested_two_folders_deep_is_refused_by_name(tmp_path):
    model, data = _model_with_data()
    with pytest.raises(UnsafeArchive, match="member 'a/b/model.onnx.data' is nested more than one folder deep"):
        safe_extract_archive(_zip(tmp_path, {"model.onnx": model, "a/b/model.onnx.data": data}), _dest(tmp_path))


def test_an_empty_onnx_in_an_archive_is_called_empty_not_an_old_ir_version(tmp_path):
    from service.errors import InvalidModel

    dest = _dest(tmp_path)
    onnx_path = safe_extract_archive(_zip(tmp_path, {"model.onnx": b""}), dest)
    with pytest.raises(InvalidModel, match="empty or not an ONNX model"):
        onnx_model_from_path(onnx_path)
