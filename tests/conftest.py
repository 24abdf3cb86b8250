"""Shared fixtures: expensive comparisons run once per session and are shared by every test."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

warnings.filterwarnings("ignore")


@pytest.fixture(scope="session")
def compared(tmp_path_factory):
    """``compared(example, **options) -> (Report, workdir)``, cached per example + options.

    Latency is off unless asked for: timing is for bench/, and it costs seconds per artifact. The extras
    (advice, the per-tensor table) get 60 s unless a budget is asked for.
    """
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    cache: dict[str, tuple] = {}

    def run(example: str, **options):
        options.setdefault("latency", {"enabled": False})
        # The extras within 60 s, not the default share of the essentials' time (half of a tiny example's
        # essentials measures its best candidate only): the tests that read advice need all its re-runs.
        if "extras" not in options:
            options["extras"] = {"seconds": 60.0}
        key = example + json.dumps(options, sort_keys=True)
        if key not in cache:
            workdir = tmp_path_factory.mktemp(f"cmp_{example}")
            request = ComparisonRequest(example=example, options=ComparisonOptions.model_validate(options))
            cache[key] = (run_comparison(request, workdir), workdir)
        return cache[key]

    return run


@pytest.fixture(scope="session")
def tiny_onnx_models(tmp_path_factory):
    """Small fp32 ONNX files written by torch.onnx.export, for upload-style tests: {name: path}."""
    import torch

    from service.examples import EXAMPLES

    out = tmp_path_factory.mktemp("onnx_models")
    paths = {}
    for name in ("conv_relu", "tiny_conv_net"):
        ex = EXAMPLES[name]
        model = ex.factory()
        shape = [2 if isinstance(d, str) else d for d in ex.inputs[0].shape]
        with torch.no_grad():
            program = torch.onnx.export(model, (torch.randn(shape),), dynamo=True, verbose=False,
                                        input_names=["x"], dynamic_shapes=({0: torch.export.Dim("batch")},))
        path = out / f"{name}.onnx"
        program.save(str(path))
        paths[name] = path
    return paths
