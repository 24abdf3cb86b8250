"""Static budgets checked before any heavy call (onnxruntime, quantize_static, torch.export.load).

Each field names the setting that raises it (``QUANTCOMPARE_BUDGET_<FIELD>`` by convention of
the service config); every refusal quotes the field name so an operator knows what to change.
The defaults fit real vision/NLP models of ResNet-50 / BERT-base size with room to spare and
refuse the amplification files measured on this stack (a 132-byte ConstantOfShape worth 1 GB,
a 111-byte sparse initializer worth 1 GB, a 100k-node chain, 64 initializers sharing one range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from service.errors import BudgetExceeded

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Budgets:
    # ONNX graph
    max_nodes: int = 30_000  # all nodes, subgraphs and model-local functions included
    max_initializer_bytes: int = 1 * GiB  # dense size: sparse initializers and every external reference counted
    max_tensor_bytes: int = 512 * MiB  # any one initializer / constant / declared weight
    max_constant_output_bytes: int = 64 * MiB  # ConstantOfShape/Expand/Tile/Range/... fed by constants
    # any one tensor the graph computes, at the job's input shapes (safety/activations.py); the largest
    # in the real-world corpus is 15 MiB, a 2048x1024 feature map of 64 channels is 512 MiB
    max_activation_bytes: int = 512 * MiB
    max_subgraph_depth: int = 8  # If/Loop/Scan bodies nested in each other (silero-vad nests 4)
    max_loop_trip_count: int = 100_000  # a Loop's constant trip count
    # One fp32 inference on one sample, checked in the fp32 stage (fp32/runs.py): a Loop whose trip
    # count comes from an input's value states none in the file. A job at the defaults runs each file at five
    # levels on every sample, so a model past this per sample could not finish the job's time limit anyway.
    max_run_seconds: float = 60.0
    max_input_elements: int = 64 * 1024 * 1024  # one declared model input (elements), as fed for calibration
    max_graph_inputs: int = 256
    # ORT's quantizer checks each tensor against every graph output (is_graph_output, a list scan):
    # a graph of 5000 outputs spent 158 s in quantize_static alone; real models have a few dozen.
    max_graph_outputs: int = 1024
    max_sample_bytes: int = 2 * GiB  # every calibration + evaluation sample together, as generated
    # archives (.pt2 and .zip/.tar of model + external data)
    max_archive_members: int = 4096
    max_archive_bytes: int = 2 * GiB  # total uncompressed
    max_json_bytes: int = 64 * MiB  # one JSON member of a .pt2 (models/model.json holds the graph)
    max_compression_ratio: float = 200.0  # uncompressed / compressed, per member and overall
    max_symbolic_expr_chars: int = 2_000
    max_declared_tensor_bytes: int = 4 * GiB  # any tensor a .pt2 graph declares (weights and activations)

    def refuse(self, setting: str, what: str, value: int | float, *, unit: str = "") -> BudgetExceeded:
        limit = getattr(self, setting)
        return BudgetExceeded(
            f"{what}: {_fmt(value, unit)} exceeds the budget {setting} = {_fmt(limit, unit)}.",
            hint=f"Use a smaller model, or ask the operator to raise the budget '{setting}'.",
            budget=setting,
            limit=limit,
            value=value,
        )


DEFAULT_BUDGETS = Budgets()


def check_sample_bytes(shapes: dict[str, tuple[int, ...]], dtypes: dict[str, str], count: int,
                       budgets: Budgets | None = None) -> None:
    """Refuse sample sets too large to hold: each input's size is bounded on its own
    (``max_input_elements``), but ``count`` samples of several inputs multiply."""


    budgets = budgets or DEFAULT_BUDGETS
    per_sample = 0
    for name, shape in shapes.items():
        try:
            itemsize = np.dtype(dtypes.get(name, "float32")).itemsize
        except TypeError:
            itemsize = 4
        per_sample += math.prod(shape) * itemsize
    total = per_sample * count
    if total > budgets.max_sample_bytes:
        refused = budgets.refuse("max_sample_bytes", f"{count} samples of {_fmt(per_sample, 'bytes')} each", total,
                                 unit="bytes")
        fit = budgets.max_sample_bytes // per_sample
        fewer = f"Ask for at most {fit} samples in all (options.calibration_samples + eval_samples), or " if fit >= 2 else ""
        refused.hint = fewer + "set smaller options.input_shapes, or ask the operator to raise the budget 'max_sample_bytes'."
        raise refused


def _fmt(v: int | float, unit: str) -> str:
    if unit == "bytes":
        if v >= GiB:
            return f"{v / GiB:.2f} GiB"
        if v >= MiB:
            return f"{v / MiB:.1f} MiB"
        return f"{int(v)} bytes"
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"
