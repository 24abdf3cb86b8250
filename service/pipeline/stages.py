"""The stages of a comparison: the one list the spine's docstring, the README's chain and the tree rule
(tests/test_tree_rules.py) are checked against.

``STEPS`` is the order ``run_comparison`` (compare.py) runs them in, each with the folder that holds it.
``FOLDERS`` is the order the stage folders may import in: a folder imports only those before it and the
shared base. The two differ in one place, on purpose: ``platforms`` runs right after the latency runs,
but reads the verdict's tables (decisions, platform notes) for each emulated platform, so its folder
comes after ``verdict``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    name: str  # as the clock and the progress call it
    folder: str  # the stage folder under service/pipeline/
    does: str
    where: str = ""  # the module whose function runs it, under service/pipeline/


STEPS: tuple[Step, ...] = (
    Step("prepare", "inputs", "load + check the model, resolve input shapes, make the shared samples",
         "inputs/stage.py"),
    Step("fp32", "fp32", "the fp32 ONNX reference (uploaded, or exported from torch)", "fp32/stage.py"),
    Step("quantize", "quantize", "pt2e_qdq | ort_qdq | ort_qoperator, each failing alone", "quantize/stage.py"),
    Step("inspect", "inspect", "what each file writes", "inspect/stage.py"),
    Step("optimize", "runtime", "each artifact x each ORT level: the graph ORT runs, diffed level to level"),
    Step("evaluate", "runtime", "numerics vs fp32 (untimed, on the job's cores)", "runtime/stage.py"),
    Step("latency", "runtime", "at options.latency_levels, each graph timed alone", "runtime/stage.py"),
    Step("platforms", "platforms", "the same on each emulated platform options.platforms names (arm64)",
         "platforms/stage.py"),
    Step("layers", "layers", "per-tensor error against fp32", "layers/layers_stage.py"),
    Step("advice", "advice", "the changes the blockers point to, re-run and measured", "advice/stage.py"),
    Step("decide", "verdict", "artifacts' final status, decisions, lints, platform notes, verdict",
         "verdict/decide.py"),
)

FOLDERS: tuple[str, ...] = ("inputs", "fp32", "quantize", "inspect", "runtime", "layers", "advice", "verdict",
                            "platforms")
SHARED_BASE: tuple[str, ...] = ("ort",)  # folders of service/pipeline/ every stage may import


def steps_table() -> str:
    """``STEPS`` as the spine's docstring shows them, one line each."""
    return "\n".join(f"    {s.name:<9} {s.does:<71}{s.where}".rstrip() for s in STEPS)


def folders_chain() -> str:
    """``FOLDERS`` as the README shows them."""
    return " -> ".join(f"`{f}`" for f in FOLDERS)
