"""The tool paths: NNCF, ModelOpt and Quark quantizing the same fp32 file on the same calibration samples.

Each tool runs in a subprocess, never in the worker (shared/notes/quantizers.md):

- NNCF lives in the project's venv (``make`` installs it) and sends usage telemetry unless ``CI=true``;
- ModelOpt monkey-patches ``onnxruntime.quantization`` process-wide (calibrators, registries), which would
  silently change the ORT paths of every later job in the worker; it lives in a side venv;
- Quark pins onnx<=1.22 (the project pins 1.23.2), needs torch it does not declare and compiles a C++
  library on first import; it lives in a side venv.

``make tools`` builds the side venvs under ``.venv/tools/<venv>`` (or ``QUANTCOMPARE_TOOLS_ROOT``). A tool
that is missing skips its path with ``tool_unavailable`` and the command that installs it. The runner scripts
(``runners/``) import nothing of ``service``: they read a request JSON and the samples as .npz, write
the file and a result JSON. The file then gets the tool and version in its ``metadata_props``, because
NNCF copies the input's producer and ModelOpt writes ORT's: neither file says who made it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from service.errors import ToolUnavailable
from service.pipeline.inputs.samples import Feed
from service.pipeline.isolation import scrub
from service.schemas.report import ToolInfo

RUNNERS = Path(__file__).parent / "runners"
# What a tool run may take before it is stopped: Quark's first import compiles for ~30 s on 2 cores.
TOOL_TIMEOUT_S = 900.0
# metadata_props keys every tool path's file carries (the report's file.metadata_props shows them).
TOOL_KEY, VERSION_KEY, PRESET_KEY = "quantcompare.tool", "quantcompare.tool_version", "quantcompare.preset"


@dataclass(frozen=True)
class ToolPath:
    artifact: str
    tool: str  # what the report names it
    runner: str  # the script in runners/
    venv: str | None  # side venv under the tools root; None: the project's own interpreter
    module: str  # what must import for the tool to be there
    install: str  # the command that installs it, for the skip's hint


TOOL_PATHS = {
    "nncf_qdq": ToolPath("nncf_qdq", "NNCF nncf.quantize (ONNX backend)", "nncf_runner.py", None, "nncf",
                         "make venv (pyproject pins nncf==3.4.0), or pip install nncf==3.4.0"),
    "modelopt_qdq": ToolPath("modelopt_qdq", "NVIDIA ModelOpt modelopt.onnx.quantization", "modelopt_runner.py",
                             "modelopt", "modelopt.onnx.quantization", "make tools (a 1.4 GB side venv, .venv/tools/modelopt)"),
    "quark_qdq": ToolPath("quark_qdq", "AMD Quark quark.onnx ModelQuantizer", "quark_runner.py", "quark", "quark.onnx",
                          "make tools (a 1.7 GB side venv, .venv/tools/quark; g++ for its first import)"),
}


def tools_root() -> Path:
    """``QUANTCOMPARE_TOOLS_ROOT``, else ``tools/`` in the environment the service runs from (.venv)."""
    return Path(os.environ.get("QUANTCOMPARE_TOOLS_ROOT") or Path(sys.prefix) / "tools")


def tool_python(path: ToolPath) -> Path | None:
    """The interpreter that has the tool, or None when it is not installed (checked by ``ready`` files:
    ``make tools`` writes ``<venv>/ready.json`` once the tool imported, so a half-built venv counts as missing)."""
    if path.venv is None:
        return Path(sys.executable) if importlib.util.find_spec(path.module.split(".")[0]) else None
    venv = tools_root() / path.venv
    python = venv / "bin" / "python"
    return python if (venv / "ready.json").is_file() and python.exists() else None


def quantized_by_tool(artifact: str, fp32_path: Path, out_path: Path, calibration: list[Feed],
                      settings: dict, *, preset: str, scratch: Path) -> ToolInfo:
    """``artifact``'s tool quantizing ``fp32_path`` into ``out_path`` on ``calibration``, in a subprocess.

    ``settings``: the ORT paths' resolved settings (``resolved_ort_settings``), which ``matched`` follows as far
    as the tool has them. Raises ToolUnavailable when the tool is not installed."""
    path = TOOL_PATHS[artifact]
    python = tool_python(path)
    if python is None:
        raise ToolUnavailable(f"{path.tool} is not installed where this job runs", stage="quantize",
                              hint=f"install it with: {path.install}; the other paths are unaffected")
    work = scratch / artifact
    work.mkdir(parents=True, exist_ok=True)
    names = list(calibration[0]) if calibration else []
    np.savez(work / "calibration.npz", **{f"s{i}_{k}": feed[name] for i, feed in enumerate(calibration)
                                          for k, name in enumerate(names)})
    request = {"model": str(fp32_path.resolve()), "out": str(out_path.resolve()), "preset": preset,
               "calibration": str((work / "calibration.npz").resolve()), "samples": len(calibration),
               "input_names": names, "settings": {k: v for k, v in settings.items() if k != "extra_options"},
               "extra_options": settings.get("extra_options", {}), "result": str((work / "result.json").resolve())}
    (work / "request.json").write_text(json.dumps(request), encoding="utf-8")
    t0 = time.perf_counter()
    done = _run_runner(python, path, work)
    if done.returncode != 0 or not (work / "result.json").is_file():
        tail = [ln for ln in (done.stderr or "").splitlines() if ln.strip()][-1:] or [f"exit {done.returncode}"]
        raise RuntimeError(f"{path.tool} failed: {scrub(tail[0])[:500]}")
    result = json.loads((work / "result.json").read_text(encoding="utf-8"))
    _stamp(out_path, path.tool, result["version"], preset)
    return ToolInfo(name=path.tool, version=result["version"], calibration=result.get("calibration"),
                    producer=f"{path.tool} {result['version']} (recorded by the job; also in metadata_props)",
                    settings={"preset": preset, **result.get("settings", {}),
                              "not_matched": result.get("not_matched", [])},
                    notes=[f"ran in a subprocess ({'project venv' if path.venv is None else 'side venv ' + path.venv})"
                           f" in {time.perf_counter() - t0:.1f} s", *result.get("notes", [])])


def _run_runner(python: Path, path: ToolPath, work: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    # CI=true: openvino-telemetry (NNCF's) sends nothing; the others have none to turn off.
    # Quark's custom ops: built by `make tools` into the tools root, found there (with the venv's ninja on PATH).
    env.update(CI="true", PYTHONNOUSERSITE="1", OMP_NUM_THREADS="1", TQDM_DISABLE="1",
               TORCH_EXTENSIONS_DIR=str(tools_root() / "torch_extensions"),
               PATH=os.pathsep.join([str(python.parent), env.get("PATH", "/usr/bin:/bin")]))
    # -B: no __pycache__ written beside the runners (an installed service may not own that folder)
    return subprocess.run([str(python), "-B", str(RUNNERS / path.runner), str(work / "request.json")], cwd=work, env=env,
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)


def _stamp(out_path: Path, tool: str, version: str, preset: str) -> None:
    """The tool, its version and the preset in the file's metadata_props (replacing any earlier stamp)."""
    import onnx

    model = onnx.load(str(out_path))
    keep = [p for p in model.metadata_props if p.key not in (TOOL_KEY, VERSION_KEY, PRESET_KEY)]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for key, value in ((TOOL_KEY, tool), (VERSION_KEY, version), (PRESET_KEY, preset)):
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(out_path))
