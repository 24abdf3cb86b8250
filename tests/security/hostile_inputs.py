"""The corpus of hostile and broken submissions, built in code.

Each :class:`Case` is one POST /v1/comparisons and what the service must answer: a 4xx with a
stable ``code`` (``where="api"``: refused before anything is queued), or, where only a worker
can tell (onnx's C++ checker, .zip/.tar model archives), a job that ends ``failed`` with that
``code`` (``where="worker"``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import random
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import test_safety_onnx as onnx_bombs  # builders of the amplification files measured on this stack
import test_safety_pt2 as pt2_routes  # each route by which torch.export.load runs code
from safety_models import conv_onnx, read_members, tiny_onnx, write_members

F = TensorProto.FLOAT
CANARY = "quantcompare-canary-7f3a"  # content of a file outside the job folder that must never be read


@dataclass(frozen=True)
class Env:
    """Where the hostile files point: a canary outside every job folder, a marker payloads touch."""

    outside: Path  # a folder next to the server's data dir, holding secret.bin (CANARY)
    marker: Path  # a code-execution payload would create this file
    good_pt2: Path


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Env], dict]  # -> httpx request kwargs for POST /v1/comparisons
    status: int
    code: str | tuple[str, ...]  # a tuple: any of these (the .pt2 routes may trip a budget first)
    where: str = "api"  # "api": refused at submit; "worker": accepted, the job fails with `code`
    never_echoed: tuple[str, ...] = field(default_factory=tuple)


def model_form(data: bytes, *, name: str = "model.onnx", options: dict | str | None = None,
               calibration: bytes | None = None) -> dict:
    files = {"model": (name, data, "application/octet-stream")}
    if options is not None:
        files["options"] = (None, options if isinstance(options, str) else json.dumps(options))
    if calibration is not None:
        files["calibration"] = ("calib.npz", calibration, "application/octet-stream")
    return {"files": files}


def raw_multipart(body: bytes, boundary: str = "bnd") -> dict:
    return {"content": body, "headers": {"content-type": f"multipart/form-data; boundary={boundary}"}}


def ser(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString()


def npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def npz_compressed(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def conv_bytes() -> bytes:
    return ser(conv_onnx())  # input x: [1, 3, 8, 8] float32


def good_x(n: int = 4) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 1, 3, 8, 8)).astype(np.float32)


# --- ONNX structure ---------------------------------------------------------------------------

def _cycle() -> onnx.ModelProto:
    return tiny_onnx(nodes=[helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                            helper.make_node("Relu", ["a"], ["y"])])


def _ids_model() -> bytes:
    """ids: [1, 4] int32 into a 10-row table."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32), "table")
    return ser(tiny_onnx(nodes=[helper.make_node("Gather", ["table", "ids"], ["y"])],
                         inputs=[helper.make_tensor_value_info("ids", TensorProto.INT32, [1, 4])],
                         outputs=[helper.make_tensor_value_info("y", F, [1, 4, 4])], initializers=[table]))


def _external(location: str) -> bytes:
    w = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    w.ClearField("float_data")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        w.external_data.add(key=k, value=v)
    m = tiny_onnx(nodes=[helper.make_node("Add", ["x", "w"], ["y"])], initializers=[w])
    return ser(m)


def _checker_only_failure() -> onnx.ModelProto:
    # A Relu with an attribute Relu does not have: only onnx's C++ checker sees it (in the worker).
    return tiny_onnx(nodes=[helper.make_node("Relu", ["x"], ["y"], bogus_attribute=3)])


def _dynamic_input() -> onnx.ModelProto:
    return tiny_onnx(inputs=[helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])],
                     outputs=[helper.make_tensor_value_info("y", F, ["n", 3, "h", "w"])])


def _archive_zip_traversal() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("model.onnx", conv_bytes())
        zf.writestr("../../../../escaped-by-zip.txt", b"written outside")
    return buf.getvalue()


def _archive_tar_symlink(env: Env) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = _external("secret.bin")
        info = tarfile.TarInfo("model.onnx")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("secret.bin")
        link.type = tarfile.SYMTYPE
        link.linkname = str(env.outside / "secret.bin")
        tf.addfile(link)
    return buf.getvalue()


# --- not a model at all -----------------------------------------------------------------------

class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _torch_checkpoint(env: Env) -> bytes:
    return pt2_routes.torch_save_bytes(_Payload(env.marker))


def _torchscript() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("net/data.pkl", pickle.dumps({"x": 1}))
        zf.writestr("net/constants.pkl", pickle.dumps(()))
        zf.writestr("net/code/__torch__/net.py", "def forward(self, x): return x\n")
        zf.writestr("net/version", "3\n")
    return buf.getvalue()


def _plain_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("readme.txt", "hello")
    return buf.getvalue()


def _pt2(craft) -> Callable[[Env], dict]:
    def build(env: Env) -> dict:
        m = read_members(env.good_pt2)
        craft(m, env.marker)
        p = env.marker.parent / f"hostile-{craft.__name__}.pt2"
        write_members(m, p, compress=zipfile.ZIP_DEFLATED)
        return model_form(p.read_bytes(), name="innocent.onnx")  # sniffed by content, not by name
    return build


def _exported(forward: Callable) -> bytes:
    """A .pt2 torch.export.save writes for Linear(4, 4) followed by ``forward(torch, y)``."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return forward(torch, self.fc(x))

    buf = io.BytesIO()
    torch.export.save(torch.export.export(Net().eval(), (torch.randn(2, 4, 4),)), buf)
    return buf.getvalue()


def _exported_without_inputs() -> bytes:
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            self.register_buffer("x", torch.randn(2, 4))

        def forward(self):
            return self.fc(self.x)

    buf = io.BytesIO()
    torch.export.save(torch.export.export(Net().eval(), ()), buf)
    return buf.getvalue()


def _multipart(parts: list[tuple[str, str | None, bytes]]) -> bytes:
    out = b""
    for name, filename, data in parts:
        fn = f'; filename="{filename}"' if filename is not None else ""
        out += f'--bnd\r\nContent-Disposition: form-data; name="{name}"{fn}\r\n\r\n'.encode() + data + b"\r\n"
    return out + b"--bnd--\r\n"


BAD_NAMES = ["../../../../etc/passwd", "/var/lib/evil.onnx", "..\\..\\windows\\evil.onnx",
             "<script>alert(1)</script>.onnx", "x" * 3000 + ".onnx", "a\u202eb\u0007c.onnx"]

CASES: list[Case] = [
    # not a model, sniffed by content
    Case("an empty file", lambda e: model_form(b""), 422, "invalid_model"),
    Case("random bytes", lambda e: model_form(random.Random(1).randbytes(4096)), 422, "invalid_model"),
    Case("a truncated protobuf", lambda e: model_form(conv_bytes()[:200]), 422, "invalid_model"),
    Case("a protobuf that is a GraphProto, not a model", lambda e: model_form(conv_onnx().graph.SerializeToString()),
         422, "invalid_model"),
    Case("a TensorProto alone", lambda e: model_form(numpy_helper.from_array(np.ones((3, 3), np.float32)).SerializeToString()),
         422, "invalid_model"),
    Case("a pickle named .onnx", lambda e: model_form(pickle.dumps(_Payload(e.marker), protocol=2)), 422, "invalid_model"),
    Case("a torch.save checkpoint named .onnx", lambda e: model_form(_torch_checkpoint(e)), 422, "invalid_model"),
    Case("a TorchScript archive named .onnx", lambda e: model_form(_torchscript()), 422, "invalid_model"),
    Case("a gzip file", lambda e: model_form(gzip.compress(conv_bytes())), 422, "invalid_model"),
    Case("a .npy file", lambda e: model_form(b"\x93NUMPY\x01\x00" + b"\0" * 100), 422, "invalid_model"),
    Case("a zip that is neither .pt2 nor a model archive", lambda e: model_form(_plain_zip()), 422, "invalid_model"),
    Case("an HTML page", lambda e: model_form(b"<html><body>model</body></html>"), 422, "invalid_model"),
    # broken or unsupported ONNX
    Case("a graph with no nodes", lambda e: model_form(ser(tiny_onnx(nodes=[], outputs=[helper.make_tensor_value_info("x", F, [1, 4])]))),
         422, "invalid_model"),
    Case("a graph with a cycle", lambda e: model_form(ser(_cycle())), 422, "invalid_model"),
    Case("a node reading an undefined value",
         lambda e: model_form(ser(tiny_onnx(nodes=[helper.make_node("Add", ["x", "nowhere"], ["y"])]))), 422, "invalid_model"),
    Case("an unknown ai.onnx operator",
         lambda e: model_form(ser(tiny_onnx(nodes=[helper.make_node("NoSuchOp", ["x"], ["y"])]))), 422, "unsupported_model"),
    Case("an unknown operator domain",
         lambda e: model_form(ser(onnx_bombs._with_domain("evil.example"))), 422, "unsupported_model"),
    Case("opset 99", lambda e: model_form(ser(tiny_onnx(opset=99))), 422, "unsupported_model"),
    Case("opset 3", lambda e: model_form(ser(tiny_onnx(opset=3))), 422, "unsupported_model"),
    Case("IR version 99", lambda e: model_form(ser(tiny_onnx(ir=99))), 422, "unsupported_model"),
    Case("a model only onnx's C++ checker refuses", lambda e: model_form(ser(_checker_only_failure())),
         422, "invalid_model", where="worker"),
    Case("dynamic dims without input_shapes", lambda e: model_form(ser(_dynamic_input())), 422, "input_shape_required"),
    # external data tricks
    Case("external data at ../", lambda e: model_form(_external("../outside/secret.bin")), 422, "invalid_model"),
    Case("external data at an absolute path", lambda e: model_form(_external(str(e.outside / "secret.bin"))),
         422, "invalid_model"),
    Case("external data that was not uploaded", lambda e: model_form(_external("secret.bin")), 422, "invalid_model"),
    Case("a model archive with a member escaping the folder", lambda e: model_form(_archive_zip_traversal(), name="m.zip"),
         422, "unsafe_archive", where="worker"),
    Case("a model archive whose data file is a symlink", lambda e: model_form(_archive_tar_symlink(e), name="m.tgz"),
         422, "unsafe_archive", where="worker"),
    # amplification
    Case("ConstantOfShape worth 1 GB", lambda e: model_form(ser(onnx_bombs.constant_of_shape_1gb())), 422, "budget_exceeded"),
    Case("ConstantOfShape behind Mul", lambda e: model_form(ser(onnx_bombs.constant_of_shape_behind_mul())), 422, "budget_exceeded"),
    Case("a 1 GB sparse initializer", lambda e: model_form(ser(onnx_bombs.sparse_initializer_1gb())), 422, "budget_exceeded"),
    Case("a 40k-node chain", lambda e: model_form(ser(onnx_bombs.chain(40_000))), 422, "budget_exceeded"),
    Case("Expand to 1 GB", lambda e: model_form(ser(onnx_bombs.expand_big())), 422, "budget_exceeded"),
    Case("Range to 4 GB", lambda e: model_form(ser(onnx_bombs.range_big())), 422, "budget_exceeded"),
    Case("an initializer whose raw data is shorter than its dims", lambda e: model_form(ser(onnx_bombs._short_raw())),
         422, "invalid_model"),
    Case("Tile to 1 GB", lambda e: model_form(ser(onnx_bombs.tile_big())), 422, "budget_exceeded"),
    Case("a Loop with a huge trip count", lambda e: model_form(ser(onnx_bombs.loop_forever())), 422, "budget_exceeded"),
    Case("Ifs nested 10 deep", lambda e: model_form(ser(onnx_bombs.nested_ifs(10))), 422, "budget_exceeded"),
    Case("a declared input of 300M elements",
         lambda e: model_form(ser(tiny_onnx(inputs=[helper.make_tensor_value_info("x", F, [1, 3, 10000, 10000])],
                                            outputs=[helper.make_tensor_value_info("y", F, [1, 3, 10000, 10000])]))),
         422, "budget_exceeded"),
    Case("input_shapes asking for 300M elements",
         lambda e: model_form(ser(_dynamic_input()), options={"input_shapes": {"x": [1, 3, 10000, 10000]}}),
         422, "budget_exceeded"),
    # sizes and the multipart body itself
    Case("a model over the upload limit", lambda e: model_form(b"\x08" * (3 * 1024 * 1024)), 413, "payload_too_large"),
    Case("calibration over its limit", lambda e: model_form(conv_bytes(), calibration=b"P" * (2 * 1024 * 1024)),
         413, "payload_too_large"),
    Case("options over 64 KiB", lambda e: model_form(conv_bytes(), options=" " * (70 * 1024)), 413, "payload_too_large"),
    # cut before its closing boundary: refused as cut (nothing runs on a part of a form), issue 44
    Case("a truncated multipart body", lambda e: raw_multipart(b'--bnd\r\nContent-Disposition: form-data; name="model"'),
         400, "incomplete_upload"),
    Case("garbage instead of multipart", lambda e: raw_multipart(b"\x00\xff" * 500), 400, "invalid_request"),
    Case("multipart without a boundary", lambda e: {"content": b"x", "headers": {"content-type": "multipart/form-data"}},
         400, "invalid_request"),
    Case("the model field twice", lambda e: raw_multipart(_multipart([("model", "a.onnx", b"1"), ("model", "b.onnx", b"2")])),
         400, "invalid_request"),
    Case("an unexpected form field", lambda e: raw_multipart(_multipart([("model", "a.onnx", conv_bytes()), ("evil", None, b"1")])),
         400, "invalid_request"),
    Case("no model field", lambda e: raw_multipart(_multipart([("options", None, b"{}")])), 400, "invalid_request"),
    Case("a JSON array body", lambda e: {"json": [1, 2]}, 400, "invalid_request"),
    Case("an unknown example", lambda e: {"json": {"example": "../../etc/passwd"}}, 422, "invalid_options"),
    Case("plain text", lambda e: {"content": b"hi", "headers": {"content-type": "text/plain"}}, 415, "invalid_request"),
    # calibration .npz that does not fit the model (x: [1, 3, 8, 8] float32)
    Case("calibration with a wrong input name", lambda e: model_form(conv_bytes(), calibration=npz(nope=good_x())),
         422, "invalid_calibration"),
    # 300 MB of zeros in 300 KB, under a key that is no input: past what the API unpacks, so the worker
    # read every array of the archive into memory before it looked at the names
    Case("calibration with a stray key that unpacks to 300 MB",
         lambda e: model_form(conv_bytes(), calibration=npz_compressed(x=good_x(), junk=np.zeros(75 << 20, np.float32))),
         422, "invalid_calibration"),
    Case("calibration with a wrong shape", lambda e: model_form(conv_bytes(), calibration=npz(x=np.ones((4, 1, 3, 9, 9), np.float32))),
         422, "invalid_calibration"),
    Case("calibration with a wrong dtype", lambda e: model_form(conv_bytes(), calibration=npz(x=good_x().astype(np.complex64))),
         422, "invalid_calibration"),
    Case("calibration with NaN", lambda e: model_form(conv_bytes(), calibration=npz(x=np.where(good_x() > 1, np.nan, good_x()))),
         422, "invalid_calibration"),
    Case("calibration with Inf", lambda e: model_form(conv_bytes(), calibration=npz(x=np.where(good_x() > 1, np.inf, good_x()))),
         422, "invalid_calibration"),
    Case("calibration holding a pickled object array",
         lambda e: model_form(conv_bytes(), calibration=npz(x=np.array([_Payload(e.marker)], dtype=object))),
         422, "invalid_calibration"),
    # values the input's type cannot hold were cast anyway: float64 past float32 became inf (and every
    # path failed blaming the model), int64 ids past int32 wrapped around into valid-looking ids
    Case("calibration in float64 past float32's range",
         lambda e: model_form(conv_bytes(), calibration=npz(x=good_x().astype(np.float64) * 1e300)), 422, "invalid_calibration"),
    Case("calibration int64 ids past int32",
         lambda e: model_form(_ids_model(), calibration=npz(ids=np.arange(16).reshape(4, 1, 4) % 10 + 2**32)),
         422, "invalid_calibration"),
    # was dropped as if no file had been sent: the job ran on generated samples
    Case("an empty calibration file", lambda e: model_form(conv_bytes(), calibration=b""), 422, "invalid_calibration"),
    # ids past the table's rows: ORT refuses the Gather; this was invalid_options with a hint to change
    # input_shapes, though every dim is the model's own
    Case("calibration ids past the table's rows",
         lambda e: model_form(_ids_model(), calibration=npz(ids=np.arange(16, dtype=np.int32).reshape(4, 1, 4) + 10)),
         422, "invalid_calibration", where="worker"),
    Case("calibration that is not an .npz", lambda e: model_form(conv_bytes(), calibration=b"not a zip at all"),
         422, "invalid_calibration"),
    # options
    Case("options that are not JSON", lambda e: model_form(conv_bytes(), options="{nope"), 422, "invalid_options"),
    Case("options that are a list", lambda e: model_form(conv_bytes(), options="[1]"), 422, "invalid_options"),
    # deeper than Python's json parser recurses: a RecursionError was a 500 and a dropped connection
    Case("options nested 50 000 deep", lambda e: model_form(conv_bytes(), options="[" * 50_000), 422, "invalid_options"),
    Case("a JSON body nested 50 000 deep", lambda e: {"content": b"[" * 50_000, "headers": {"content-type": "application/json"}},
         400, "invalid_request"),
    Case("an unknown option", lambda e: model_form(conv_bytes(), options={"calibraton_samples": 3}), 422, "invalid_options"),
    Case("an option out of range", lambda e: model_form(conv_bytes(), options={"calibration_samples": 10**9}),
         422, "invalid_options"),
    Case("an option of the wrong type", lambda e: model_form(conv_bytes(), options={"levels": "all"}), 422, "invalid_options"),
    # options.ort_session reaches ORT's SessionOptions: an entry that makes ORT write a file where it says is refused
    Case("an ORT session entry that writes a file",
         lambda e: model_form(conv_bytes(), options={"ort_session": {"session.optimized_model_external_initializers_file_name":
                                                                     "../../x.data"}}), 422, "invalid_options"),
    Case("input_shapes for an input the model lacks", lambda e: model_form(conv_bytes(), options={"input_shapes": {"z": [1]}}),
         422, "invalid_options"),
    # Python's json reads NaN and Infinity: the report stored the gate's value as null, and the job
    # "succeeded" with a report the service could not load
    Case("a gate value of NaN", lambda e: model_form(conv_bytes(), options='{"gates": [{"metric": "sqnr_db", "value": NaN}]}'),
         422, "invalid_options"),
    Case("an input_values constant of Infinity",
         lambda e: model_form(conv_bytes(), options='{"input_values": {"x": {"constant": Infinity}}}'), 422, "invalid_options"),
    # past the input's dtype: numpy raised (an internal error) or the samples were drawn as inf
    Case("an input_values range wider than float64",
         lambda e: model_form(conv_bytes(), options={"input_values": {"x": {"low": -1e308, "high": 1e308}}}),
         422, "invalid_options", where="worker"),
    Case("an input_values constant past float32",
         lambda e: model_form(conv_bytes(), options={"input_values": {"x": {"constant": 1e300}}}),
         422, "invalid_options", where="worker"),
    # nothing was made or measured, and the verdict read "passed"
    Case("an empty list of levels", lambda e: model_form(conv_bytes(), options={"levels": []}), 422, "invalid_options"),
    # quantize_static read [] as its default, every op type: the opposite of what was asked
    Case("an empty list of op types to quantize", lambda e: model_form(conv_bytes(), options={"ort": {"op_types_to_quantize": []}}),
         422, "invalid_options"),
    Case("an empty list of artifacts", lambda e: model_form(conv_bytes(), options={"artifacts": []}), 422, "invalid_options"),
    Case("an input_values range with only one end",
         lambda e: model_form(conv_bytes(), options={"input_values": {"x": {"low": 0}}}), 422, "invalid_options"),
    # lax parsing read these as 1 sample, latency off and 4 samples: a typo ran another comparison
    Case("true for a count", lambda e: model_form(conv_bytes(), options={"calibration_samples": True}),
         422, "invalid_options"),
    Case("a string for a switch", lambda e: model_form(conv_bytes(), options={"latency": {"enabled": "no"}}),
         422, "invalid_options"),
    Case("a string for a count", lambda e: model_form(conv_bytes(), options={"eval_samples": "4"}), 422, "invalid_options"),
]

# every route by which a .pt2 runs code or eats memory, named .onnx
CASES += [Case(f".pt2: {label}", _pt2(craft), 422, ("unsafe_archive", "budget_exceeded"))
          for label, craft in pt2_routes.ROUTES.items()]

# torch.onnx.export of these raised inside the fp32 stage: an internal error, as if quantcompare had a bug
CASES += [
    Case(".pt2 returning a Python number beside its tensor",
         lambda e: model_form(_exported(lambda torch, y: (y, y.shape[0])), name="m.pt2"), 422, "unsupported_model",
         where="worker"),
    Case(".pt2 with an op the ONNX exporter has no function for",
         lambda e: model_form(_exported(lambda torch, y: torch.cumprod(y, -1)), name="m.pt2"), 422, "unsupported_model",
         where="worker"),
    # an ONNX upload without inputs is refused; this ran, and both ORT paths failed 'No data is collected'
    Case(".pt2 whose forward() takes no inputs", lambda e: model_form(_exported_without_inputs(), name="m.pt2"), 422,
         "unsupported_model", where="worker"),
]

# hostile filenames on a broken model: refused, and the name is never echoed
CASES += [Case(f"hostile filename {i}", (lambda name: lambda e: model_form(b"\x00garbage", name=name))(name),
               422, "invalid_model", never_echoed=(name[:40],))
          for i, name in enumerate(BAD_NAMES)]
