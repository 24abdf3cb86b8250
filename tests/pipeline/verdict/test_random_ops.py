"""A model that draws random numbers (a VAE's sampling, a TTS model's noise) without a seed attribute:
ORT seeds each such kernel with one process-wide value (from the clock unless onnxruntime.set_seed
is called) plus the node's index (cpu/generator/random.h). Before, the report compared fp32 with
files that drew other numbers and said nothing, and the figures moved from job to job.

Pinned in the installed ORT: with the seed set, two processes draw the same numbers; a quantized file
(the op at another node index) draws other numbers than fp32, and a seed attribute makes them equal."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

from tests import models

_DRAW = """
import sys
import numpy as np
import onnxruntime as ort
ort.set_seed(0)
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
print(float(s.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})[0].sum()))
"""


def _run(tmp_path, model):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    options = ComparisonOptions.model_validate({
        "artifacts": ["ort_qdq"], "levels": ["disable_all"], "calibration_samples": 4, "eval_samples": 2,
        "latency": {"enabled": False}, "advice": {"enabled": False}, "layers": {"enabled": False}})
    return run_comparison(ComparisonRequest(model_path=model, model_name=model.name, options=options), tmp_path / "job")


def _eps(path) -> np.ndarray:
    ort.set_seed(0)
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(["eps"], {"x": np.ones((1, 3, 8, 8), np.float32)})[0]


def test_unseeded_noise_is_named_and_differs_between_fp32_and_the_quantized_file(tmp_path):
    models.save("sampler", tmp_path / "vae.onnx")
    draws = {subprocess.run([sys.executable, "-c", _DRAW, str(tmp_path / "vae.onnx")], capture_output=True,
                            text=True, check=True).stdout for _ in range(2)}
    assert len(draws) == 1  # set_seed: the same numbers in two processes (the job is reproducible)

    report = _run(tmp_path, tmp_path / "vae.onnx")
    lint = next(lt for lt in report.lints if lt.code == "random_ops")
    assert "RandomNormalLike x1" in lint.message and "node's index" in lint.message and "seed attribute" in lint.hint
    quantized = tmp_path / "job" / "artifacts" / "ort_qdq.onnx"
    assert not np.allclose(_eps(tmp_path / "vae.onnx"), _eps(quantized))  # another node index, other numbers


def test_a_seed_attribute_makes_every_file_draw_the_same_noise_and_silences_the_lint(tmp_path):
    models.save("sampler", tmp_path / "vae.onnx", seed=7.0)
    report = _run(tmp_path, tmp_path / "vae.onnx")
    assert not any(lt.code == "random_ops" for lt in report.lints)
    quantized = tmp_path / "job" / "artifacts" / "ort_qdq.onnx"
    assert any(a.name == "seed" for n in onnx.load(str(quantized)).graph.node for a in n.attribute)
    ref, got = _eps(tmp_path / "vae.onnx"), _eps(quantized)
    scale = float(np.abs(ref).max()) / 127  # the file quantizes eps itself: equal to one int8 step
    assert np.abs(ref - got).max() <= scale * 1.01
