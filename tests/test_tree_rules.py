"""Rules of the code tree that a reviewer would otherwise check by hand.

- The API process never imports torch: importing any module of ``service`` leaves torch,
  torchao and onnxruntime out of ``sys.modules`` (heavy imports live inside the
  functions that need them), and a running app answers a real upload without importing them.
- In-house and standard-library imports are top-level, so a module's first lines say what it
  depends on; only third-party toolchains (and the optional Celery executor) are imported lazily.
- No folder of ``service/`` holds more than 12 modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICE = ROOT / "service"
HEAVY = ("torch", "torchao", "onnxruntime")
# The ONNX -> torch converters: torch code by nature, imported only by
# quantize/onnx_torch/registry.py when a conversion runs (in a worker, never in the API process).
TORCH_ONLY = "service.pipeline.quantize.onnx_torch.ops."


def _python(code: str, *, cwd: Path) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_importing_any_service_module_imports_no_toolchain(tmp_path):
    heavy = _python(f"""
import importlib, pkgutil, sys
import service
for m in pkgutil.walk_packages(service.__path__, "service."):
    if m.name.startswith({TORCH_ONLY!r}):
        continue
    importlib.import_module(m.name)
print(sorted(h for h in {HEAVY!r} if h in sys.modules))
""", cwd=tmp_path)
    assert heavy == "[]"


def test_the_api_process_answers_an_upload_without_importing_torch(tmp_path):
    # A real app (lifespan, executor, prevalidation of the upload in the API process); its one
    # worker runs a job function that does not need the toolchain, so only the API is measured.
    # Prevalidation normally runs only for the real job function: it is switched on here.
    jobs = ROOT / "tests" / "jobs"
    heavy = _python(f"""
import io, sys
sys.path.insert(0, {str(jobs)!r})
import onnx
from onnx import TensorProto, helper
from fastapi.testclient import TestClient
from service.api import prevalidate
from service.api.app import create_app
from service.config import Settings

prevalidate.applies = lambda settings: True

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
settings = Settings(data_dir={str(tmp_path / "var")!r}, workers=1, worker_preload="", job_function="fault_jobs:run")
with TestClient(create_app(settings)) as c:
    assert c.get("/v1/versions").status_code == 200
    r = c.post("/v1/comparisons", files={{"model": ("m.onnx", model.SerializeToString())}})
    assert r.status_code in (200, 202), r.text
    assert c.get(r.json()["links"]["self"]).status_code == 200
print(sorted(h for h in {HEAVY!r} if h in sys.modules))
""", cwd=tmp_path)
    assert heavy == "[]"


# Lazy imports that stay lazy, and why.
LAZY_ALLOWED = {
    ("service/jobs/factory.py", "service.jobs.celery.executor"),  # celery/redis only when configured
    ("service/jobs/cli_worker.py", "service.jobs.celery.worker"),  # the same, for `quantcompare worker`
}
_STDLIB = set(sys.stdlib_module_names)


def _lazy_in_house_or_stdlib_imports() -> list[tuple[str, str]]:
    found = []
    for path in sorted(SERVICE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.col_offset == 0:
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for name in names:
                top = name.split(".")[0]
                if (top == "service" or top in _STDLIB) and (rel, name) not in LAZY_ALLOWED:
                    found.append((rel, name))
    return found


def test_in_house_and_stdlib_imports_are_top_level():
    assert _lazy_in_house_or_stdlib_imports() == []


@pytest.mark.parametrize("folder", sorted(p for p in SERVICE.rglob("*") if p.is_dir() and p.name != "__pycache__"),
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_folder_holds_more_than_twelve_modules(folder):
    assert len([p for p in folder.glob("*.py") if p.name != "__init__.py"]) <= 12


# The stages of a comparison, in the order the spine (service/pipeline/compare.py) runs them. A stage's
# folder imports only from the stages before it and from the shared base (pipeline/*.py, pipeline/ort/),
# which imports no stage: a helper two stages need lives in the base, not in the later stage.
STAGE_ORDER = ("inputs", "fp32", "quantize", "inspect", "runtime", "layers", "advice", "verdict", "platforms")
SHARED_BASE = ("ort",)  # folders of service/pipeline/ that every stage may import
# Outside the pipeline: schemas/ (the JSON) imports no pipeline or route module; render/ (what a person
# reads) imports no route; pipeline/ imports neither api/ nor jobs/ nor render/.
LAYERS = {
    "service.schemas": ("service.pipeline", "service.api", "service.jobs", "service.render"),
    "service.render": ("service.api", "service.jobs"),
    "service.pipeline": ("service.api", "service.jobs", "service.render"),
}


def _in_house_imports():
    for path in sorted(SERVICE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("service"):
                yield module, node.module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("service"):
                        yield module, alias.name


def _pipeline_part(module: str) -> str | None:
    """'inputs', 'quantize', ... for a stage folder's module; 'base' for the shared base; None outside."""
    parts = module.split(".")
    if parts[:2] != ["service", "pipeline"] or len(parts) < 3:
        return None
    if len(parts) == 3 or parts[2] in SHARED_BASE:
        return "spine" if parts[2] == "compare" else "base"
    return parts[2]


def test_stages_import_only_the_stages_before_them():
    upward = []
    for module, imported in _in_house_imports():
        here, there = _pipeline_part(module), _pipeline_part(imported)
        if here is None or there is None or here == there or here == "spine":
            continue
        if here == "base" and there != "base":
            upward.append(f"{module} (shared base) imports stage {imported}")
        elif here in STAGE_ORDER and there in STAGE_ORDER and STAGE_ORDER.index(there) > STAGE_ORDER.index(here):
            upward.append(f"{module} ({here}) imports the later stage {imported}")
        elif there == "spine":
            upward.append(f"{module} imports the spine {imported}")
    assert upward == []


def test_every_pipeline_folder_is_a_stage_or_the_shared_base():
    folders = {p.name for p in (SERVICE / "pipeline").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(STAGE_ORDER) | set(SHARED_BASE)


def test_the_layers_of_the_package_import_downward():
    wrong = [f"{module} imports {imported}" for module, imported in _in_house_imports()
             for layer, forbidden in LAYERS.items() if module.startswith(layer + ".") or module == layer
             for f in forbidden if imported.startswith(f)]
    assert wrong == []


# Literal sets of three or more op names outside the vocabulary, each a table that cites where it comes
# from or belongs to one evaluator: (file, the names) -> why it stays where it is. Any other literal of
# op names belongs in service/pipeline/vocabulary.py under one name.
OP_NAME_TABLES_ALLOWED = {
    ("service/pipeline/inputs/model_ranges.py", frozenset({"Cast", "Identity", "Reshape", "Expand", "Unsqueeze",
                                                           "Squeeze", "Flatten", "Transpose", "Gather",
                                                           "GatherElements", "Slice"})):
        "the ops an id keeps its value through, on the way to an embedding (this module's walk)",
    ("service/pipeline/inputs/safety/onnx_checks.py", frozenset({
        "ConstantOfShape", "Expand", "Tile", "Range", "RandomNormal", "RandomUniform", "EyeLike", "Resize",
        "Upsample", "Pad", "OneHot"})): "the static checker's amplifiers (output size set by values)",
    ("service/pipeline/inputs/safety/onnx_checks.py", frozenset({
        "Identity", "Cast", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Mul", "Add", "Sub", "Div", "Max", "Min",
        "Abs", "Neg", "Gather", "Shape", "Size", "Slice", "ReduceProd", "ReduceSum", "Flatten"})):
        "the static checker's tiny evaluator: the ops it folds",
    ("service/pipeline/inputs/safety/onnx_checks.py", frozenset({"Mul", "Add", "Sub", "Div", "Max", "Min"})):
        "the same evaluator's dispatch",
    ("service/pipeline/inspect/blockers.py", frozenset({
        "Conv", "ConvTranspose", "MatMul", "Gemm", "GlobalAveragePool", "AveragePool", "GRU", "Add", "Mul", "Concat",
        "Relu", "Clip", "MaxPool", "ReduceMean", "Transpose", "Squeeze", "Reshape", "Slice", "Flatten"})):
        "torchao's XNNPACK quantizer's annotated ops, cited from its source",
    ("service/pipeline/inspect/blockers.py", frozenset({"Constant", "ConstantOfShape", "Identity", "Range"})):
        "ops the blockers table never calls compute (with SHAPE_READING_OPS)",
    ("service/pipeline/inspect/inventory.py", frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
                                                         "Identity"})):
        "what torch.onnx.export puts between a weight's DequantizeLinear and its reader",
    ("service/pipeline/layers/layers_retry.py", frozenset({
        "Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "Sigmoid", "Softmax", "Concat", "AveragePool",
        "GlobalAveragePool", "LeakyRelu", "Relu", "Clip", "BatchNormalization"})):
        "the ops exclude-and-retry may leave in float",
    ("service/pipeline/layers/tensor_alignment.py", frozenset({"BatchNormalization", "Identity", "Dropout"})):
        "fp32 ops a quantizer folds into a neighbour or pre-processing removes",
    ("service/pipeline/quantize/onnx_torch/ops/rnn.py", frozenset({"Sigmoid", "Tanh"})):
        "the ONNX RNN/GRU/LSTM schemas' default activations",
    ("service/pipeline/verdict/lints.py", frozenset({"Mul", "Sub", "Add", "Reshape", "Transpose"})):
        "a dequantized integer weight's way to its reader (scale Mul, zero-point Sub)",
    ("service/pipeline/quantize/already_quantized.py", frozenset({"QGemm", "QAttention", "MatMulNBits"})):
        "name suffixes that tell a dynamically quantized file's kernels apart",
    ("service/pipeline/quantize/already_quantized.py", frozenset({"Integer", "QGemm", "QAttention", "MatMulNBits"})):
        "name suffixes that tell a QOperator file's kernels apart",
    ("service/render/svg.py", frozenset({"Transpose", "ReorderInput", "ReorderOutput"})):
        "the page's colour for layout plumbing",
}


def _op_names() -> set[str]:
    import onnx

    from service.pipeline import vocabulary

    names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
    for value in vars(vocabulary).values():  # contrib ops the vocabulary names, without their domain
        if isinstance(value, (set, frozenset)):
            names |= {v.rsplit(".", 1)[-1] for v in value if isinstance(v, str)}
    return names


def test_no_literal_of_three_op_names_outside_the_vocabulary():
    ops = _op_names()
    found = {}
    for path in sorted(SERVICE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "service/pipeline/vocabulary.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                continue
            names = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            hits = [n for n in names if n in ops]
            if len(hits) >= 3 and len(hits) >= 0.6 * len(names):
                key = (rel, frozenset(names))
                if key not in OP_NAME_TABLES_ALLOWED:
                    found[f"{rel}:{node.lineno}"] = sorted(set(names))
    assert found == {}
