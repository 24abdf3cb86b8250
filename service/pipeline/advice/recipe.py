"""Advice as a recipe: the calls that make a candidate's file and session outside the service.

One source of truth: the ``quantize_static`` keyword arguments come from
``quantize/ort_quant.quantize_static_kwargs`` of ``settings_with_change`` (the very settings advice's
re-run hands ``quantized_by_ort``), and the steps before it are the ones the quantize stage recorded
while it made the file both ORT paths read (``Quantized.ort_steps``). ``python`` is the same, as a
script a user pastes: it reads the job's ``fp32.onnx`` and a ``calibration.npz`` in the upload format
(``numpy.savez(path, **{input: samples on axis 0})``), and writes ``<artifact>.recipe.onnx``.

A tool other than ORT's ``quantize_static`` and torchao's PT2E gets a recipe that says so
(``tool`` null, ``note``): issue 50's quantizers state their own calls.

``options`` re-runs the job with the change: an ``ort`` change where ``resolved_ort_settings`` reads it, a
``session`` change (an ORT session config entry) in ``options.ort_session``, which every session that
measures the files on this machine has (level graphs, accuracy, latency, profile, advice), so the artifact is
measured under the entry as advice's re-run measured it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from service.pipeline.quantize.ort_quant import quantize_static_kwargs
from service.schemas.advice import Recipe, RecipeStep
from service.schemas.options import BUILTIN_ARTIFACTS, ComparisonOptions, resolved_ort_settings

__all__ = ["RecipeBase", "recipe_for", "settings_with_change", "options_with_change", "ORT_ARTIFACTS"]

ORT_ARTIFACTS = {"ort_qdq": "qdq", "ort_qoperator": "qoperator"}
_LEVEL_NAMES = {"disable_all": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
                "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}
_ENUMS = ("QuantFormat.", "QuantType.", "CalibrationMethod.")


@dataclass(frozen=True)
class RecipeBase:
    """What every recipe of one job shares."""

    options: ComparisonOptions  # the job's options
    ort_steps: list[dict] = field(default_factory=list)  # Quantized.ort_steps
    level: str = "all"  # options.advice.level
    input_names: list[str] = field(default_factory=list)
    calibration_count: int = 0  # how many samples calibrated (the first of calibration.npz)
    tools: dict[str, str] = field(default_factory=dict)  # artifact -> ToolInfo.name


def settings_with_change(settings: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (resolved quantize_static settings) with ``change["ort"]`` merged in: a dict value
    (extra_options) merged key by key, anything else replaced. What advice re-quantizes with."""
    out = copy.deepcopy(settings)
    for k, v in change.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def options_with_change(options: ComparisonOptions, change: dict[str, Any]) -> ComparisonOptions | None:
    """The job's options with an ``ort`` change set where ``resolved_ort_settings`` reads it and a ``session``
    change merged into ``ort_session``, so that a job run with them quantizes as the candidate did and
    measures it under the candidate's session entries; None for a change no job option expresses (a key
    other than those two, or a session entry ``ort_session`` does not allow)."""
    if set(change) - {"ort", "session"}:
        return None
    data = options.model_dump(mode="json")
    ort = data.setdefault("ort", {})
    for k, v in change.get("ort", {}).items():
        ort[k] = {**(ort.get(k) or {}), **v} if isinstance(v, dict) else v
    data["ort_session"] = {**data.get("ort_session", {}), **_session(change)}
    try:
        return ComparisonOptions.model_validate(data)
    except ValidationError:
        return None


def recipe_for(artifact: str, change: dict[str, Any], base: RecipeBase) -> Recipe:
    """The recipe of ``change`` to ``artifact``."""
    if artifact in ORT_ARTIFACTS:
        return _ort_recipe(artifact, change, base)
    if artifact == "pt2e_qdq":
        return _pt2e_recipe(change, base)
    tool = base.tools.get(artifact) or artifact
    rerun, note = _session_rerun(artifact, change, base)
    return Recipe(tool=None, session=_job_session(change, base), level=base.level,
                  options=rerun.model_dump(mode="json", exclude_defaults=True) if rerun is not None else None,
                  options_note=note,
                  note=f"no recipe for this tool ({tool}): quantcompare states calls for ORT's quantize_static "
                       "and torchao's PT2E only", python=f"# no recipe for this tool ({tool})\n")


def _session(change: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in change.get("session", {}).items()}


def _job_session(change: dict[str, Any], base: RecipeBase) -> dict[str, str]:
    """The session config entries the candidate ran with: the job's (``options.ort_session``), the change's over them."""
    return {**base.options.ort_session, **_session(change)}


def _session_rerun(artifact: str, change: dict[str, Any], base: RecipeBase) -> tuple[ComparisonOptions | None, str | None]:
    """(options, options_note) for a file quantcompare does not make again with the change (PT2E, the tool
    paths, a brought file): only a session change re-runs there, and a brought file is not an option."""
    if artifact not in BUILTIN_ARTIFACTS:
        return None, _BROUGHT
    rerun = options_with_change(base.options, change) if set(change) == {"session"} else None
    if rerun is None:
        return None, _NO_OPTION
    if rerun.model_dump(exclude={"ort_session"}) != base.options.model_dump(exclude={"ort_session"}) \
            or rerun.ort_session != _job_session(change, base):
        raise AssertionError("recipe.options would run otherwise than the candidate")  # a bug, never a user's
    return rerun, None


def _ort_recipe(artifact: str, change: dict[str, Any], base: RecipeBase) -> Recipe:
    settings = settings_with_change(resolved_ort_settings(base.options), change.get("ort", {}))
    kwargs = quantize_static_kwargs(settings, ORT_ARTIFACTS[artifact])
    steps = [RecipeStep(**s) for s in base.ort_steps]
    own = [s.what for s in steps if s.call is None]
    rerun = options_with_change(base.options, change)
    if rerun is not None and (quantize_static_kwargs(resolved_ort_settings(rerun), ORT_ARTIFACTS[artifact]) != kwargs
                              or rerun.ort_session != _job_session(change, base)):
        raise AssertionError("recipe.options would quantize otherwise than the candidate")  # a bug, never a user's
    recipe = Recipe(
        tool="onnxruntime", steps=steps, quantize_static=kwargs, session=_job_session(change, base), level=base.level,
        options=rerun.model_dump(mode="json", exclude_defaults=True) if rerun is not None else None,
        options_note=None if rerun is not None else _NO_OPTION,
        exact=not own,
        note=("quantcompare changed the file before quantize_static in ways no public call repeats: "
              + "; ".join(own)) if own else None)
    return recipe.model_copy(update={"python": _ort_python(artifact, change, recipe, base)})


_NO_OPTION = ("no job option expresses this change (options.ort_session takes the ORT session config entries "
              "advice emits only): its figures are advice's re-run only")
_BROUGHT = ("a brought file is not an option: re-run the job with the same file brought beside the model and "
            "options.ort_session set to the recipe's session entries")


def _pt2e_recipe(change: dict[str, Any], base: RecipeBase) -> Recipe:
    per_channel = base.options.pt2e.per_channel
    config = {"quantizer": "torchao.testing.pt2e._xnnpack_quantizer.XNNPACKQuantizer",
              "config": "get_symmetric_quantization_config", "is_per_channel": per_channel,
              "calibration_samples": base.calibration_count}
    rerun, options_note = _session_rerun("pt2e_qdq", change, base)
    recipe = Recipe(tool="torchao", pt2e=config, session=_job_session(change, base), level=base.level,
                    options=rerun.model_dump(mode="json", exclude_defaults=True) if rerun is not None else None,
                    options_note=options_note, exact=False,
                    note="the file is the job's artifacts/pt2e_qdq.onnx as it is: torchao's calls below made it from "
                         "the exported program (an ONNX upload is first converted by quantcompare's own converter, "
                         "which no public call repeats); the change is the session's")
    return recipe.model_copy(update={"python": _pt2e_python(change, recipe)})


def _literal(value: Any) -> str:
    """A keyword argument's value as Python source (an enum member's name stays a name)."""
    if isinstance(value, str) and value.startswith(_ENUMS):
        return value
    return repr(value)


def _reader(base: RecipeBase) -> list[str]:
    return [
        "class Calibration(CalibrationDataReader):",
        f'    """The first {base.calibration_count} samples of calibration.npz (the job\'s calibration samples)."""',
        "",
        f"    def __init__(self, path, names={base.input_names!r}, count={base.calibration_count}):",
        "        data = np.load(path)",
        "        self.feeds = iter([{n: data[n][i] for n in names} for i in range(count)])",
        "",
        "    def get_next(self):",
        "        return next(self.feeds, None)",
        "",
    ]


def _session_lines(path: str, session: dict[str, str], level: str) -> list[str]:
    lines = ["so = ort.SessionOptions()",
             f"so.graph_optimization_level = ort.GraphOptimizationLevel.{_LEVEL_NAMES.get(level, 'ORT_ENABLE_ALL')}"]
    lines += [f"so.add_session_config_entry({k!r}, {v!r})" for k, v in session.items()]
    lines.append(f'session = ort.InferenceSession({path!r}, so, providers=["CPUExecutionProvider"])')
    return lines


def _ort_python(artifact: str, change: dict[str, Any], recipe: Recipe, base: RecipeBase) -> str:
    out = f"{artifact}.recipe.onnx"
    lines = [f"# quantcompare recipe: {artifact} with {json.dumps(change, sort_keys=True)}",
             "# fp32.onnx: the job's artifacts/fp32.onnx; calibration.npz: numpy.savez(path, **{input: samples on "
             "axis 0})"]
    if recipe.note:
        lines.append(f"# NOT EXACT: {recipe.note}")
    lines += ["import numpy as np", "import onnxruntime as ort",
              "from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,",
              "                                      quantize_static)"]
    if any(s.call for s in recipe.steps):
        lines.append("from onnxruntime.quantization.shape_inference import quant_pre_process")
    lines += ["", ""] + _reader(base) + [""]
    source = "fp32.onnx"
    for k, step in enumerate(recipe.steps):
        if step.call is None:
            lines.append(f"# step of quantcompare's own, not repeated here: {step.what}")
            continue
        target = f"fp32.step{k + 1}.onnx"
        args = ", ".join(f"{key}={_literal(v)}" for key, v in step.kwargs.items())
        lines.append(f"{step.call.rsplit('.', 1)[1]}({source!r}, {target!r}{', ' + args if args else ''})")
        source = target
    kw = ",\n".join(f"    {key}={_literal(v)}" for key, v in (recipe.quantize_static or {}).items())
    lines.append(f'quantize_static({source!r}, {out!r}, Calibration("calibration.npz"),\n{kw},\n)')
    lines += _session_lines(out, recipe.session, recipe.level or "all")
    return "\n".join(lines) + "\n"


def _pt2e_python(change: dict[str, Any], recipe: Recipe) -> str:
    cfg = recipe.pt2e or {}
    lines = [f"# quantcompare recipe: pt2e_qdq with {json.dumps(change, sort_keys=True)}",
             f"# NOT EXACT: {recipe.note}",
             "# How the file was made (program = torch.export.export(model, example_args)):",
             "#   from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e",
             "#   from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, "
             "get_symmetric_quantization_config",
             f"#   quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config("
             f"is_per_channel={cfg.get('is_per_channel')!r}))",
             "#   prepared = prepare_pt2e(program.module(), quantizer)",
             f"#   for sample in calibration[:{cfg.get('calibration_samples')}]: prepared(*sample)",
             "#   torch.onnx.export(convert_pt2e(prepared), example_args, dynamo=True).save('pt2e_qdq.onnx')",
             "import onnxruntime as ort", ""]
    lines += _session_lines("pt2e_qdq.onnx", recipe.session, recipe.level or "all")
    return "\n".join(lines) + "\n"
