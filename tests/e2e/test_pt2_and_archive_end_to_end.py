"""A real ``torch.export`` archive (.pt2, dynamic batch) and a .zip of ONNX + external data, end to end:
through the core, the ``quantcompare compare`` CLI, and HTTP against a live server.

Oracles are independent of the program: torch eager outputs of the module that was exported, the
uploaded samples the test wrote, ORT sessions the test opens itself, and hashlib.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.cpu import sqnr_floor

BATCH = 2  # the batch the comparison runs at: not the batch the .pt2 was exported with (3)
N_CAL, N_EVAL = 4, 2
OPTIONS = {"calibration_samples": N_CAL, "eval_samples": N_EVAL, "latency": {"enabled": False},
           "input_shapes": {"x": [BATCH, 3, 8, 8]}}
PATHS = ("pt2e_qdq", "ort_qdq", "ort_qoperator")


def _net():
    import torch

    class Net(torch.nn.Module):  # forward(x): the input keeps the name "x" in the .pt2 and the ONNX
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    torch.manual_seed(0)
    return Net().eval()


@pytest.fixture(scope="module")
def pt2_upload(tmp_path_factory):
    """(net.pt2 exported with Dim("batch"), samples.npz, the eager module, the eval feeds)."""
    import torch
    from torch.export import Dim, export

    folder = tmp_path_factory.mktemp("pt2")
    net = _net()
    with torch.no_grad():
        program = export(net, (torch.randn(3, 3, 8, 8),), dynamic_shapes={"x": {0: Dim("batch")}})
    pt2 = folder / "net.pt2"
    torch.export.save(program, str(pt2))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N_CAL + N_EVAL, BATCH, 3, 8, 8)).astype(np.float32)
    npz = folder / "samples.npz"
    np.savez(npz, x=x)
    return pt2, npz, net, [x[i] for i in range(N_CAL, N_CAL + N_EVAL)]


def _eager(net, feeds):
    import torch

    with torch.no_grad():
        return np.concatenate([net(torch.from_numpy(f)).numpy() for f in feeds])


def _ort(path: Path, feeds, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return np.concatenate([sess.run(None, {name: f})[0] for f in feeds])


def _sqnr(ref, got):
    ref, noise = ref.astype(np.float64), ref.astype(np.float64) - got.astype(np.float64)
    return 10 * np.log10((ref ** 2).sum() / (noise ** 2).sum())


def _check_pt2_report(report: dict, artifacts: Path, pt2: Path, net, eval_feeds):
    """What a user relies on after sending a .pt2, checked against oracles the program did not make."""
    model = report["model"]
    assert model["format"] == "pt2" and model["sha256"] == hashlib.sha256(pt2.read_bytes()).hexdigest()
    (spec,) = model["inputs"]
    assert isinstance(spec["shape"][0], str) and spec["shape"][1:] == [3, 8, 8]  # the batch stayed symbolic
    assert model["resolved_input_shapes"] == {spec["name"]: [BATCH, 3, 8, 8]}
    assert report["samples"]["source"] == "uploaded" and report["samples"]["eval_count"] == N_EVAL
    assert {a: art["status"] for a, art in report["artifacts"].items()} == {
        "fp32": "ok", **{p: "ok" for p in PATHS}}, {a: art["error"] for a, art in report["artifacts"].items()}
    # the fp32 ONNX the service exported IS the eager module, weights and all
    want = _eager(net, eval_feeds)
    np.testing.assert_allclose(_ort(artifacts / "fp32.onnx", eval_feeds), want, rtol=1e-4, atol=1e-5)
    reference = _ort(artifacts / "fp32.onnx", eval_feeds)
    for name in PATHS:
        # each quantized file runs at the comparison's batch; its SQNR, recomputed here from ORT's
        # outputs on the uploaded held-out samples, is the one the report states
        got = _ort(artifacts / f"{name}.onnx", eval_feeds)
        assert got.shape == want.shape
        stated = report["artifacts"][name]["optimized"]["disable_all"]["numerics"]["worst_sqnr_db"]
        assert stated == pytest.approx(_sqnr(reference, got), abs=1e-3), name
        assert stated > sqnr_floor("disable_all", clean=25)


def test_pt2_through_the_core(pt2_upload, tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    pt2, npz, net, eval_feeds = pt2_upload
    report = run_comparison(ComparisonRequest(model_path=pt2, model_name="net.pt2", calibration_path=npz,
                                              options=ComparisonOptions.model_validate(OPTIONS)), tmp_path)
    _check_pt2_report(json.loads(report.model_dump_json()), tmp_path / "artifacts", pt2, net, eval_feeds)


def test_pt2_through_the_cli(pt2_upload, tmp_path):
    pt2, npz, net, eval_feeds = pt2_upload
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "service.cli", "compare", str(pt2), "--calibration", str(npz),
                           "--options", json.dumps(OPTIONS), "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_pt2_report(json.loads((out / "report.json").read_text()), out / "artifacts", pt2, net, eval_feeds)


def test_pt2_through_http(real_server, pt2_upload, tmp_path):
    pt2, npz, net, eval_feeds = pt2_upload
    with real_server.client(timeout=600) as c:
        r = c.post("/v1/comparisons", params={"wait": 500},
                   files={"model": ("net.pt2", pt2.read_bytes()), "calibration": ("samples.npz", npz.read_bytes())},
                   data={"options": json.dumps(OPTIONS)})
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] == "succeeded", job["error"]
        folder = tmp_path / "artifacts"
        folder.mkdir()
        for name in ("fp32", *PATHS):
            got = c.get(f"{job['links']['artifacts']}/{name}.onnx")
            assert got.status_code == 200, got.text
            (folder / f"{name}.onnx").write_bytes(got.content)
    _check_pt2_report(job["report"], folder, pt2, net, eval_feeds)


# ---- an archive: ONNX + external data in a .zip -------------------------------------------------

@pytest.fixture(scope="module")
def zipped_onnx(tmp_path_factory, pt2_upload):
    """The same net as an ONNX file whose weights live in net.weights, zipped together."""
    import torch

    _, npz, net, eval_feeds = pt2_upload
    folder = tmp_path_factory.mktemp("zip")
    with torch.no_grad():
        program = torch.onnx.export(net, (torch.randn(BATCH, 3, 8, 8),), dynamo=True, verbose=False,
                                    input_names=["x"], dynamic_shapes=({0: torch.export.Dim("batch")},))
    program.save(str(folder / "tmp.onnx"))
    model = onnx.load(str(folder / "tmp.onnx"))
    onnx.save_model(model, str(folder / "net.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="net.weights", size_threshold=1024)
    assert (folder / "net.weights").stat().st_size >= 4 * 8 * 8 * 8 * 10  # the Linear weight is outside
    archive = folder / "net.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(folder / "net.onnx", "net.onnx")
        zf.write(folder / "net.weights", "net.weights")
    return archive, npz, net, eval_feeds


def _check_archive_report(report: dict, artifacts: Path, archive: Path, net, eval_feeds):
    assert report["model"]["format"] == "onnx"
    assert report["model"]["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert {a: art["status"] for a, art in report["artifacts"].items()} == {"fp32": "ok", **{p: "ok" for p in PATHS}}
    # the external weights were really read: the fp32 artifact (with its data beside it) computes the eager net,
    # and the quantized files' dequantized weights are the eager weights to within one scale step
    np.testing.assert_allclose(_ort(artifacts / "fp32.onnx", eval_feeds), _eager(net, eval_feeds), rtol=1e-4, atol=1e-5)
    reference = _ort(artifacts / "fp32.onnx", eval_feeds)
    for name in PATHS:
        got = _ort(artifacts / f"{name}.onnx", eval_feeds)
        stated = report["artifacts"][name]["optimized"]["disable_all"]["numerics"]["worst_sqnr_db"]
        assert stated == pytest.approx(_sqnr(reference, got), abs=1e-3) and stated > 25, name
    linear = net.fc.weight.detach().numpy()
    qdq = onnx.load(str(artifacts / "ort_qdq.onnx"))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer}
    int8 = [(n, inits[n.input[0]]) for n in qdq.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].shape in (linear.shape, linear.T.shape)]
    assert int8, "no quantized copy of the Linear weight in ort_qdq.onnx"
    node, q = int8[0]
    scale = inits[node.input[1]].astype(np.float64)
    zero = inits[node.input[2]].astype(np.float64) if len(node.input) > 2 and node.input[2] else 0.0
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), np.reshape(zero, shape) if np.ndim(zero) else zero
    dequant = (q.astype(np.float64) - zero) * scale
    dequant = dequant if dequant.shape == linear.shape else dequant.T
    assert np.abs(dequant - linear).max() <= scale.max() * 0.5 + 1e-7


def test_archive_through_the_core(zipped_onnx, tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    archive, npz, net, eval_feeds = zipped_onnx
    report = run_comparison(ComparisonRequest(model_path=archive, model_name="net.zip", calibration_path=npz,
                                              options=ComparisonOptions.model_validate(OPTIONS)), tmp_path)
    _check_archive_report(json.loads(report.model_dump_json()), tmp_path / "artifacts", archive, net, eval_feeds)


def test_archive_through_http(real_server, zipped_onnx, tmp_path):
    archive, npz, net, eval_feeds = zipped_onnx
    with real_server.client(timeout=600) as c:
        r = c.post("/v1/comparisons", params={"wait": 500},
                   files={"model": ("net.zip", archive.read_bytes()), "calibration": ("samples.npz", npz.read_bytes())},
                   data={"options": json.dumps(OPTIONS)})
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["status"] == "succeeded", job["error"]
        listing = {a["name"]: a["url"] for a in c.get(job["links"]["artifacts"]).json()["artifacts"]}
        folder = tmp_path / "artifacts"
        folder.mkdir()
        for name in ["fp32.onnx", *(f"{p}.onnx" for p in PATHS), *(n for n in listing if n.endswith(".weights"))]:
            got = c.get(listing[name])
            assert got.status_code == 200, (name, got.text)
            (folder / name).write_bytes(got.content)
    _check_archive_report(job["report"], folder, archive, net, eval_feeds)
