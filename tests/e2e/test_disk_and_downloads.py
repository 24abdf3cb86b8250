"""A finished job keeps a fraction of the disk, and what a user downloads is what the job measured."""

from __future__ import annotations

import gzip
import os
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

LEVEL_VALUES = {"disable_all": 0, "basic": 1, "extended": 2, "layout": 3, "all": 99}


def _ort_optimized(model_bytes: bytes, level: str) -> onnx.ModelProto:
    """The oracle: ORT's own optimized graph, written the plain way (one file, no quantcompare code)."""
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "in.onnx", Path(d) / "out.onnx"
        src.write_bytes(model_bytes)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel(LEVEL_VALUES[level])
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        so.optimized_model_filepath = str(out)
        so.add_session_config_entry("optimization.constant_folding_max_output_size_in_bytes", str(64 << 20))
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
        return onnx.load(str(out))


def _signature(model: onnx.ModelProto):
    nodes = [(n.domain, n.op_type, tuple(n.input), tuple(n.output)) for n in model.graph.node]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return nodes, inits


def test_a_downloaded_level_graph_is_the_graph_the_job_measured(real_server, conv_relu_job):
    report = conv_relu_job["report"]
    with real_server.client(timeout=120) as c:
        base = conv_relu_job["links"]["artifacts"]
        listing = {a["name"]: a for a in c.get(base).json()["artifacts"]}
        for artifact, level in (("ort_qdq", "all"), ("pt2e_qdq", "basic"), ("fp32", "extended")):
            ol = report["artifacts"][artifact]["optimized"][level]
            assert ol["file_stored"] is False and ol["graph_sha256"]
            name = f"{artifact}.{level}.onnx"
            r = c.get(listing[name]["url"])
            assert r.status_code == 200, r.text
            assert len(r.content) == listing[name]["size"] == ol["download_bytes"]
            got = onnx.load_from_string(r.content)
            # What the job summarized ...
            hist = Counter((n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}") for n in got.graph.node)
            assert dict(hist) == ol["op_histogram"]
            # ... and what ORT itself writes for the stored artifact at that level: same nodes, same weights.
            want_nodes, want_inits = _signature(_ort_optimized(c.get(f"{base}/{artifact}.onnx").content, level))
            got_nodes, got_inits = _signature(got)
            assert got_nodes == want_nodes
            assert want_inits.keys() == got_inits.keys()
            for k, v in want_inits.items():
                np.testing.assert_array_equal(got_inits[k], v)


def test_a_finished_job_keeps_no_level_graph_weights(real_server, conv_relu_job):
    job_dir = real_server.data_dir / "jobs" / conv_relu_job["id"]
    files = sorted(p.relative_to(job_dir).as_posix() for p in job_dir.rglob("*") if p.is_file())
    level_files = [f for f in files if f.count(".") >= 2 and f.startswith("artifacts/") and f.endswith(".onnx")]
    assert level_files == []
    assert not any(f.endswith(".data") for f in files)
    assert not (job_dir / "artifacts" / "_level_graphs").exists()


def test_an_upload_is_stored_once_and_the_job_stays_within_1_5x_its_files(real_server, conv_relu_job, fast):
    import json

    with real_server.client(timeout=400) as c:
        fp32 = c.get(f"{conv_relu_job['links']['artifacts']}/fp32.onnx").content
        data = {"options": json.dumps({**fast, "seed": 21, "input_shapes": {"x": [1, 3, 16, 16]}})}
        r = c.post("/v1/comparisons", params={"wait": 300}, files={"model": ("net.onnx", fp32)}, data=data)
        job = r.json()
        assert job["status"] == "succeeded", job["error"]
    job_dir = real_server.data_dir / "jobs" / job["id"]
    upload, stored_fp32 = job_dir / "input" / "model.onnx", job_dir / "artifacts" / "fp32.onnx"
    assert os.path.samefile(upload, stored_fp32)  # identical files: one copy
    # The report is stored compressed, and it is the report the API serves.
    stored = json.loads(gzip.decompress((job_dir / "report.json.gz").read_bytes()))
    assert stored == job["report"] and not (job_dir / "report.json").exists()
    seen, total = set(), 0
    for p in job_dir.rglob("*"):
        if p.name in ("report.json.gz", "job.json"):
            continue  # metadata: kilobytes, whatever the model's size (bench/RESULTS.md counts them on real sizes)
        st = p.lstat()
        if p.is_file() and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    quantized = sum((job_dir / "artifacts" / f"{a}.onnx").stat().st_size for a in ("pt2e_qdq", "ort_qdq", "ort_qoperator"))
    assert total <= 1.5 * (upload.stat().st_size + quantized), (total, upload.stat().st_size, quantized)


def test_the_page_offers_the_level_graphs_the_job_did_not_keep(real_server, conv_relu_job):
    with real_server.client(timeout=60) as c:
        html = c.get(conv_relu_job["links"]["report_html"]).text
    assert f"/v1/comparisons/{conv_relu_job['id']}/artifacts/ort_qdq.all.onnx" in html
    assert "Latency protocol:" in html
