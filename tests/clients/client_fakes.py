"""Helpers for the client tests (imported by name: ``from client_fakes import ...``).

``FakeServer`` answers like ``docs/CONTRACTS.md`` through ``httpx.MockTransport``: it stands in
for *our own* HTTP service (not for torch or ORT), the way httpx's tests inject transports. Its
envelopes are validated by the service's own pydantic models (``service.schemas.api.Job``), so
they cannot drift from what the real server emits. ``LiveServer`` runs the real one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from service.schemas.api import Job as JobModel
from service.schemas.api import problem
from service.schemas.report import Report as ReportModel
from tests.ports import free_port

LEVELS = ("disable_all", "basic", "extended", "layout", "all")
STAGES = ("prepare", "fp32", "quantize", "inspect", "optimize", "evaluate", "decide")


def level_json(level: str, *, sqnr: float | None = 31.5, cosine=0.9995, max_abs=0.02, coverage=1.0,
               median=0.8, rewrites=()) -> dict:
    return {
        "level": level,
        "op_histogram": {"QLinearConv": 1} if level in ("extended", "layout", "all") else
                        {"QuantizeLinear": 2, "DequantizeLinear": 3, "Conv": 1, "Relu": 1},
        "node_count": 1 if level in ("extended", "layout", "all") else 7,
        "int8_coverage": coverage,
        "numerics": {
            "outputs": [{"name": "y", "reference": "y", "sqnr_db": sqnr, "cosine": cosine, "max_abs_error": max_abs}],
            "worst_sqnr_db": sqnr, "worst_cosine": cosine, "worst_max_abs_error": max_abs, "samples": 8,
        },
        "latency": {"median_ms": median, "p90_ms": median * 1.2, "runs": 10, "warmup": 2, "intra_op_threads": 1},
        "diff": {"previous": "basic", "nodes_removed": 6, "nodes_added": 1,
                 "rewrites": [{"summary": s, "kind": "qdq_fusion"} for s in rewrites]},
    }


def report_json(*, id="c0ffee", failed=(), gates=None, verdict=None, sqnr=31.5) -> dict:
    artifacts: dict[str, Any] = {
        "fp32": {"name": "fp32", "status": "ok",
                 "optimized": {lv: level_json(lv, sqnr=None, cosine=1.0, max_abs=0.0, coverage=0.0, median=1.6)
                               for lv in LEVELS}},
    }
    for name in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        if name in failed:
            artifacts[name] = {"name": name, "status": "failed",
                               "error": {"stage": "quantize", "type": "AttributeError",
                                         "message": "'NoneType' object has no attribute 'op_type'",
                                         "hint": "try the QDQ format"}}
            continue
        artifacts[name] = {
            "name": name, "status": "ok",
            "file": {"path": f"{name}.onnx", "size": 1234, "sha256": "a" * 64, "producer_name": "onnx.quantize",
                     "producer_version": "0.1.0", "ir_version": 10, "opset_imports": {"": 21}, "node_count": 7},
            "quantization": {
                "format": "qoperator" if name == "ort_qoperator" else "qdq",
                "quantize_linear": 2, "dequantize_linear": 3, "tensors": [],
                "weights": "quantized_initializer", "bias": [],
                "bias_summary": "float32" if name == "pt2e_qdq" else "int32",
                "ops_quantized": {"Conv": 1}, "ops_float": {}, "int8_kernels_in_file": {},
                "activation_dtypes": ["int8"], "weight_dtypes": ["int8"],
            },
            "optimized": {lv: level_json(lv, sqnr=sqnr, rewrites=["DequantizeLinear x3 + Conv + Relu + QuantizeLinear -> QLinearConv"]
                                         if lv == "extended" else ()) for lv in LEVELS},
        }
    data = {
        "id": id,
        "created_at": datetime(2025, 1, 1, tzinfo=timezone.utc).isoformat(),
        "environment": {"versions": {"torch": "2.13.0", "onnxruntime": "1.32.0"}, "python": "3.11.9",
                        "platform": "linux", "cpu": {"arch": "x86_64", "isa": {"avx2": True}}},
        "options": {"gates": gates or []},
        "model": {"name": "conv_relu", "sha256": "b" * 64, "format": "example", "opset_imports": {"": 18},
                  "inputs": [{"name": "x", "dtype": "float32", "shape": [2, 3, 8, 8]}],
                  "outputs": [{"name": "y", "dtype": "float32", "shape": [2, 4, 8, 8]}], "node_count": 2},
        "samples": {"source": "generated", "calibration_count": 16, "eval_count": 8, "seed": 0},
        "artifacts": artifacts,
        "decisions": [{"decision": "bias quantized to int32",
                       "where": {"pt2e_qdq": "at session level extended", "ort_qdq": "in the file",
                                 "ort_qoperator": "in the file"}}],
        "lints": [{"code": "s8_to_u8", "message": "x86 runs uint8 activations"}],
        "verdict": verdict or {"passed": True, "gates": [], "failures": []},
        "timings": {"prepare": 0.1, "quantize": 1.2},
    }
    # Round-trip through the service's model so the canned JSON is exactly what it would emit.
    return json.loads(ReportModel.model_validate(data).model_dump_json())


def job_json(id: str, status: str, *, stage=None, done=0, total=0, report=None, error=None, cached=False) -> dict:
    base = f"/v1/comparisons/{id}"
    data = {
        "id": id, "status": status, "cached": cached,
        "created_at": "2025-01-01T00:00:00Z",
        "started_at": None if status == "queued" else "2025-01-01T00:00:01Z",
        "finished_at": "2025-01-01T00:00:09Z" if status in ("succeeded", "failed") else None,
        "progress": {"stage": stage, "done": done, "total": total},
        "error": error, "report": report,
        "links": {"self": base, "report_html": f"{base}/report.html", "artifacts": f"{base}/artifacts"},
    }
    return json.loads(JobModel.model_validate(data).model_dump_json())


def problem_response(status: int, code: str, detail: str, hint: str | None = None, **headers) -> httpx.Response:
    body = problem(code, code.replace("_", " ").capitalize(), status, detail, hint)
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json", **headers})


@dataclass
class FakeServer:
    """Our HTTP API as a state machine: each GET of a running job advances one stage."""

    report: dict = field(default_factory=report_json)
    fail_with: dict | None = None  # a problem dict: the job ends ``failed``
    steps: int = 3  # GETs before the job is done
    token: str | None = None
    busy_first: int = 0  # answer 503 + Retry-After this many times first
    requests: list = field(default_factory=list)
    polls: int = 0
    artifact_bytes: bytes = b"\x08\x0aonnx-bytes" * 100

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.token and request.headers.get("authorization") != f"Bearer {self.token}":
            return problem_response(401, "unauthorized", "missing or wrong bearer token")
        path, method = request.url.path, request.method
        if method == "POST" and path == "/v1/comparisons":
            if self.busy_first:
                self.busy_first -= 1
                return problem_response(503, "busy", "all workers are busy", **{"Retry-After": "0"})
            return self._post(request)
        if method == "GET" and path == "/v1/examples":
            return httpx.Response(200, json={"examples": [
                {"name": "conv_relu", "description": "Conv + ReLU", "inputs": [{"name": "x", "dtype": "float32",
                                                                               "shape": [2, 3, 8, 8]}]}]})
        if method == "GET" and path == "/v1/versions":
            return httpx.Response(200, json={"versions": {"onnxruntime": "1.32.0"}, "python": "3.11.9",
                                             "cpu": {"arch": "x86_64"}})
        if method == "GET" and path == "/healthz":
            return httpx.Response(200, json={"status": "ok"})
        parts = path.strip("/").split("/")
        if len(parts) >= 3 and parts[:2] == ["v1", "comparisons"]:
            job_id = parts[2]
            if job_id != self.report["id"]:
                return problem_response(404, "not_found", f"no comparison {job_id}")
            if len(parts) == 3:
                return self._poll(job_id)
            if parts[3] == "report.html":
                return httpx.Response(200, text="<html>report</html>", headers={"content-type": "text/html"})
            if parts[3] == "artifacts" and len(parts) == 4:
                return httpx.Response(200, json={"artifacts": [
                    {"name": "ort_qdq.onnx", "artifact": "ort_qdq", "level": None, "size": 1234,
                     "url": f"/v1/comparisons/{job_id}/artifacts/ort_qdq.onnx"},
                    {"name": "ort_qdq.all.onnx", "artifact": "ort_qdq", "level": "all", "size": 1000,
                     "url": f"/v1/comparisons/{job_id}/artifacts/ort_qdq.all.onnx"}]})
            if parts[3] == "artifacts" and len(parts) == 5:
                if parts[4] not in ("ort_qdq.onnx", "ort_qdq.all.onnx"):
                    return problem_response(404, "not_found", f"no artifact {parts[4]}")
                return httpx.Response(200, content=self.artifact_bytes,
                                      headers={"content-disposition": f'attachment; filename="{parts[4]}"'})
        return problem_response(404, "not_found", f"no route {method} {path}")

    def _post(self, request: httpx.Request) -> httpx.Response:
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            body = json.loads(request.content)
            if body.get("example") not in ("conv_relu", "op_zoo_net"):
                return problem_response(404, "not_found", f"unknown example {body.get('example')!r}",
                                        hint="GET /v1/examples lists them")
        elif not ctype.startswith("multipart/form-data"):
            return problem_response(415, "invalid_request", "send multipart or JSON")
        self.polls = 0
        job_id = self.report["id"]
        return httpx.Response(202, json=job_json(job_id, "queued"), headers={"Location": f"/v1/comparisons/{job_id}"})

    def _poll(self, job_id: str) -> httpx.Response:
        self.polls += 1
        if self.polls <= self.steps:
            stage = STAGES[min(self.polls, len(STAGES) - 1)]
            return httpx.Response(200, json=job_json(job_id, "running", stage=stage, done=self.polls, total=self.steps + 1))
        if self.fail_with is not None:
            return httpx.Response(200, json=job_json(job_id, "failed", error=self.fail_with))
        return httpx.Response(200, json=job_json(job_id, "succeeded", report=self.report))


# ---- a real server on loopback (session) --------------------------------------------------------


REPO = Path(__file__).resolve().parents[2]
SERVER_START_TIMEOUT_S = 180




@dataclass
class LiveServer:
    url: str
    data_dir: Path
    log: Path
