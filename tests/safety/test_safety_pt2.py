"""Each route by which torch.export.load (torch 2.13) runs code from a .pt2 is crafted here from a
real archive; the static check refuses it (unsafe_archive) and its payload does not run."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from safety_models import read_members, write_members
from service.errors import BudgetExceeded, UnsafeArchive, UnsupportedModel
from service.pipeline.inputs.safety import check_pt2_archive, exported_program_from_pt2, sniff_model_format


class _Payload:
    """Unpickling this creates the marker file: the proof that code from the upload ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def payload(marker: Path) -> bytes:
    return pickle.dumps(_Payload(marker), protocol=2)


def torch_save_bytes(obj) -> bytes:
    """A torch.save archive whose data.pkl is ``obj``'s plain pickle (as a hostile writer would make)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps(obj, protocol=2) if not isinstance(obj, bytes) else obj)
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/version", "3\n")
    return buf.getvalue()


def root_of(m: dict[str, bytes]) -> str:
    return next(iter(m)).split("/", 1)[0]


def edit_json(m, rel, fn):
    key = f"{root_of(m)}/{rel}"
    doc = json.loads(m[key])
    fn(doc)
    m[key] = json.dumps(doc).encode()


def first_tensor_meta(doc):
    return next(iter(doc["graph_module"]["graph"]["tensor_values"].values()))


# --- the routes ------------------------------------------------------------------------------


def pickled_sample_inputs(m, marker):
    m[f"{root_of(m)}/data/sample_inputs/model.pt"] = torch_save_bytes(payload(marker))


def weight_marked_use_pickle(m, marker):
    r = root_of(m)
    edit_json(m, "data/weights/model_weights_config.json",
              lambda d: next(iter(d["config"].values())).update(use_pickle=True))
    name = json.loads(m[f"{r}/data/weights/model_weights_config.json"])
    path = next(iter(name["config"].values()))["path_name"]
    m[f"{r}/data/weights/{path}"] = torch_save_bytes(payload(marker))


def constant_marked_use_pickle(m, marker):
    r = root_of(m)
    m[f"{r}/data/constants/tensor_0"] = torch_save_bytes(payload(marker))
    edit_json(m, "data/constants/model_constants_config.json",
              lambda d: d["config"].update({"c": {"path_name": "tensor_0", "is_param": False, "use_pickle": True,
                                                  "tensor_meta": None}}))


def opaque_obj_constant(m, marker):
    r = root_of(m)
    m[f"{r}/data/constants/opaque_obj_0"] = payload(marker)
    edit_json(m, "data/constants/model_constants_config.json",
              lambda d: d["config"].update({"c": {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                                                  "tensor_meta": None}}))


def custom_obj_constant(m, marker):
    r = root_of(m)
    m[f"{r}/data/constants/custom_obj_0"] = payload(marker)
    edit_json(m, "data/constants/model_constants_config.json",
              lambda d: d["config"].update({"c": {"path_name": "custom_obj_0", "is_param": False, "use_pickle": True,
                                                  "tensor_meta": None}}))


def sympy_expr_str(m, marker):
    evil = f"__import__('os').system('touch {marker}')"
    edit_json(m, "models/model.json",
              lambda d: first_tensor_meta(d)["sizes"].__setitem__(0, {"as_expr": {"expr_str": evil, "hint": None}}))


def sympy_expr_str_dunder_via_allowed_name(m, marker):
    evil = f"Symbol('s0').__class__.__init__.__globals__['os'].system('touch {marker}')"
    edit_json(m, "models/model.json",
              lambda d: first_tensor_meta(d)["sizes"].__setitem__(0, {"as_expr": {"expr_str": evil, "hint": None}}))


def guards_code_exec(m, marker):
    edit_json(m, "models/model.json",
              lambda d: d.update(guards_code=[f"__import__('os').system('touch {marker}') == 0"]))


def guards_code_repeating_a_size_tuple(m, marker):
    # shape guards are taken (two inputs sharing a Dim); a torch.Size times 10^11 is not one
    edit_json(m, "models/model.json", lambda d: d.update(guards_code=["L['x'].size() * 99999999999 == 1"]))


def guards_code_calling_a_tensor_method(m, marker):
    edit_json(m, "models/model.json",
              lambda d: d.update(guards_code=["L['x'].size()[0] == 1", "L['x'].numpy().tofile('/tmp/x')[0] == 1"]))


def aoti_shared_object(m, marker):
    m[f"{root_of(m)}/data/aotinductor/model/model.so"] = b"\x7fELF" + b"\0" * 60


def aoti_traversal_name(m, marker):
    m[f"{root_of(m)}/data/aotinductor/model/../../../../../tmp/evil.so"] = b"\x7fELF"


def from_file_node(m, marker):
    edit_json(m, "models/model.json",
              lambda d: d["graph_module"]["graph"]["nodes"][0].update(target="torch.ops.aten.from_file.default"))


def arbitrary_torch_attribute_target(m, marker):
    edit_json(m, "models/model.json",
              lambda d: d["graph_module"]["graph"]["nodes"][0].update(target="torch.load"))


def extension_operator(m, marker):
    edit_json(m, "models/model.json",
              lambda d: d["graph_module"]["graph"]["nodes"][0].update(target="#evil.op"))


def extra_file_zip_bomb(m, marker):
    m[f"{root_of(m)}/extra/bomb.txt"] = b"\0" * (64 << 20)


def zero_byte_weight_declaring_64gib(m, marker):
    r = root_of(m)

    def grow(d):
        meta = next(iter(d["config"].values()))
        meta["tensor_meta"]["sizes"] = [{"as_int": 1 << 17}, {"as_int": 1 << 17}]
        meta["tensor_meta"]["strides"] = [{"as_int": 1 << 17}, {"as_int": 1}]
        m[f"{r}/data/weights/{meta['path_name']}"] = b""
    edit_json(m, "data/weights/model_weights_config.json", grow)


def traversal_member(m, marker):
    m[f"{root_of(m)}/../../evil.py"] = b"import os"


def absolute_member(m, marker):
    m["/tmp/evil.py"] = b"import os"


def subgraph_argument(m, marker):
    edit_json(m, "models/model.json",
              lambda d: d["graph_module"]["graph"]["nodes"][0]["inputs"].append(
                  {"name": "g", "arg": {"as_graph": {"name": "x", "graph": {}}}, "kind": 1}))


def higher_order_op(m, marker):
    edit_json(m, "models/model.json",
              lambda d: d["graph_module"]["graph"]["nodes"][0].update(target="torch.ops.higher_order.cond"))


def sample_inputs_reduce_builtins_eval(m, marker):
    evil = (b"\x80\x02cbuiltins\neval\nq\x00X" + len(f"__import__('os').system('touch {marker}')").to_bytes(4, "little")
            + f"__import__('os').system('touch {marker}')".encode() + b"\x85R.")
    m[f"{root_of(m)}/data/sample_inputs/model.pt"] = torch_save_bytes(evil)


def foreign_treespec_type(m, marker):
    def f(d):
        sig = d["graph_module"]["module_call_graph"][0]["signature"]
        spec = json.loads(sig["in_spec"])
        spec[1]["type"] = "os.system"
        sig["in_spec"] = json.dumps(spec)
    edit_json(m, "models/model.json", f)


ROUTES = {
    "pickled sample inputs (weights_only=False fallback)": pickled_sample_inputs,
    "sample inputs that import builtins.eval": sample_inputs_reduce_builtins_eval,
    "a weight marked use_pickle": weight_marked_use_pickle,
    "a constant marked use_pickle": constant_marked_use_pickle,
    "an opaque_obj constant (pickle.loads)": opaque_obj_constant,
    "a custom_obj constant (torchbind pickle)": custom_obj_constant,
    "a symbolic size evaluated by sympy": sympy_expr_str,
    "a symbolic size reaching globals through an allowed name": sympy_expr_str_dunder_via_allowed_name,
    "guards_code exec-ed by ep.module()": guards_code_exec,
    "guards_code repeating a size tuple": guards_code_repeating_a_size_tuple,
    "guards_code calling a tensor method": guards_code_calling_a_tensor_method,
    "an AOTInductor shared object": aoti_shared_object,
    "an AOTInductor member escaping the extraction folder": aoti_traversal_name,
    "a node targeting aten.from_file": from_file_node,
    "a node targeting torch.load": arbitrary_torch_attribute_target,
    "a node targeting an extension operator": extension_operator,
    "a higher-order op": higher_order_op,
    "a subgraph argument": subgraph_argument,
    "an extra file (zip bomb)": extra_file_zip_bomb,
    "a member name with ..": traversal_member,
    "an absolute member name": absolute_member,
    "an input tree spec naming os.system": foreign_treespec_type,
}


@pytest.mark.parametrize("craft", ROUTES.values(), ids=list(ROUTES))
def test_hostile_archive_is_refused_and_its_payload_does_not_run(tmp_path, good_pt2, craft, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    m = read_members(good_pt2)
    craft(m, marker)
    hostile = write_members(m, tmp_path / "hostile.pt2", compress=zipfile.ZIP_DEFLATED)
    with pytest.raises((UnsafeArchive, BudgetExceeded)) as e:
        exported_program_from_pt2(hostile)
    assert e.value.code in ("unsafe_archive", "budget_exceeded")
    print(e.value.message)
    assert str(tmp_path) not in e.value.message
    assert not marker.exists(), "the payload ran"


def test_the_pickle_payload_is_live(tmp_path):
    """Control: the payload used above really runs when unpickled (so 'marker absent' means something)."""
    marker = tmp_path / "control"
    pickle.loads(payload(marker))
    assert marker.exists()


def test_a_weight_declaring_64_gib_from_an_empty_record_is_refused(tmp_path, good_pt2):
    m = read_members(good_pt2)
    zero_byte_weight_declaring_64gib(m, tmp_path / "x")
    with pytest.raises(BudgetExceeded) as e:
        check_pt2_archive(write_members(m, tmp_path / "big.pt2"))
    assert e.value.details["budget"] == "max_declared_tensor_bytes"


def test_what_torch_export_save_writes_is_accepted_and_runs(tmp_path, good_pt2, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    summary = check_pt2_archive(good_pt2)
    assert "torch.ops.aten.conv2d.default" in summary.ops and summary.weights > 0
    ep = exported_program_from_pt2(good_pt2)
    out = ep.module()(torch.randn(3, 3, 6, 6))
    assert out.shape == (3, 5)
    assert os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD") is None  # restored after loading


def test_two_inputs_sharing_a_dynamic_dim_are_accepted_and_the_guard_still_holds(tmp_path, monkeypatch):
    """torch.export writes the shared Dim as guards_code ("L['ids'].size()[0] == L['mask'].size()[0]"),
    which ep.module() exec()s: every such .pt2 (input_ids + attention_mask) was refused as unsafe.
    Shape arithmetic over the inputs' sizes is taken now, and torch still checks it."""
    import torch
    from torch.export import Dim

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)

        def forward(self, ids, mask):
            return self.emb(ids) * mask.unsqueeze(-1)

    batch, seq = Dim("batch", max=64), Dim("seq", min=2, max=512)
    ep = torch.export.export(Net().eval(), (torch.randint(0, 10, (2, 5)), torch.ones(2, 5)),
                             dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    path = tmp_path / "shared.pt2"
    torch.export.save(ep, path)
    members = read_members(path)
    assert json.loads(members[f"{root_of(members)}/models/model.json"])["guards_code"]  # what made it refused
    monkeypatch.chdir(tmp_path)
    loaded = exported_program_from_pt2(path)
    assert loaded.module()(torch.randint(0, 10, (3, 7)), torch.ones(3, 7)).shape == (3, 7, 4)
    with pytest.raises(AssertionError, match="Guard failed"):
        loaded.module()(torch.randint(0, 10, (3, 7)), torch.ones(2, 7))


def test_a_rewritten_but_faithful_archive_is_still_accepted(tmp_path, good_pt2):
    check_pt2_archive(write_members(read_members(good_pt2), tmp_path / "copy.pt2", compress=zipfile.ZIP_DEFLATED))


def test_prepended_bytes_are_refused(tmp_path, good_pt2):
    p = tmp_path / "pre.pt2"
    p.write_bytes(b"\0" * 64 + good_pt2.read_bytes())
    with pytest.raises(UnsafeArchive):
        check_pt2_archive(p)


def test_duplicate_member_names_are_refused(tmp_path, good_pt2):
    m = read_members(good_pt2)
    p = write_members(m, tmp_path / "dup.pt2")
    name = next(n for n in m if n.endswith("models/model.json"))
    with pytest.warns(UserWarning), zipfile.ZipFile(p, "a") as zf:
        zf.writestr(name, b"{}")
    with pytest.raises(UnsafeArchive, match="same name"):
        check_pt2_archive(p)


def test_a_symlink_member_is_refused(tmp_path, good_pt2):
    m = read_members(good_pt2)
    p = write_members(m, tmp_path / "link.pt2")
    with zipfile.ZipFile(p, "a") as zf:
        info = zipfile.ZipInfo(f"{root_of(m)}/data/weights/weight_99")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(UnsafeArchive, match="link"):
        check_pt2_archive(p)


def test_pt2_loading_can_be_turned_off(good_pt2):
    with pytest.raises(UnsupportedModel):
        exported_program_from_pt2(good_pt2, allow_pt2=False)
    with pytest.raises(UnsupportedModel):
        sniff_model_format(good_pt2, allow_pt2=False)
