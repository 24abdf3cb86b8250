"""Fixtures for the real-world corpus: one folder for models built in code, one comparison per model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests.realworld.corpus` for bench/ too


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus")


@pytest.fixture(scope="session")
def corpus_report(tmp_path_factory, corpus_dir):
    """``corpus_report(name, **extra_options) -> Report``, or the QuantCompareError it was refused with."""
    from service.errors import QuantCompareError
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions
    from tests.missing_tools import skip_or_fail
    from tests.realworld.corpus import BY_NAME, MissingCorpusPackage

    cache: dict[str, object] = {}

    def run(name: str, **extra):
        key = name + json.dumps(extra, sort_keys=True)
        if key not in cache:
            model = BY_NAME[name]
            try:
                path = model.locate(corpus_dir)
            except MissingCorpusPackage as e:
                skip_or_fail(str(e))
            request = ComparisonRequest(model_path=path, model_name=name,
                                        options=ComparisonOptions.model_validate(model.options_with(**extra)))
            try:
                cache[key] = run_comparison(request, tmp_path_factory.mktemp(f"rw_{name}"))
            except QuantCompareError as e:
                cache[key] = e
        return cache[key]

    return run
