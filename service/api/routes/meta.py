"""/v1/examples and /v1/versions: what the server offers and runs on (no torch import)."""

from __future__ import annotations

import sys
from typing import Any

from fastapi import APIRouter

from service.api.errors import problem_responses
from service.examples import list_examples
from service.pipeline.environment import cpu_info, toolchain_versions
from service.schemas.api import ExampleList, Versions

router = APIRouter(prefix="/v1", tags=["meta"])


@router.get("/examples", response_model=ExampleList, summary="Built-in example models",
            responses=problem_responses(401))
def examples() -> Any:
    return ExampleList.model_validate({"examples": list_examples()})


@router.get("/versions", response_model=Versions, summary="Toolchain versions, Python, CPU and ISA flags",
            responses=problem_responses(401))
def versions() -> Any:
    return Versions(versions=toolchain_versions(), python=sys.version.split()[0], cpu=cpu_info())
