"""More tools on the same data: the NNCF path and a brought file beside ORT's, each on every section.

One job (module fixture) on the quantizer trial's model (tests/models.py ``conv_gap_gemm``): ort_qdq, nncf_qdq,
modelopt_qdq and quark_qdq with the tools root pointed at an empty folder (so the two side-venv tools are
missing whatever `make tools` did), and a file made here with onnx.helper as another tool would write it
(``mine``). ModelOpt and Quark themselves run in test_side_venv_tools.py when `make tools` installed them.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from service.errors import ArtifactMismatch, InvalidOptions
from service.pipeline.compare import ComparisonRequest, run_comparison
from service.pipeline.inputs.samples import generated_samples
from service.pipeline.inputs.specs import input_specs_from_onnx
from service.pipeline.runtime.numerics import sqnr_db
from service.schemas.options import ComparisonOptions
from tests.models import build
from tests.pipeline.quantize.brought_files import per_tensor_qdq_around, renamed_input

OPTIONS = {"artifacts": ["ort_qdq", "nncf_qdq", "modelopt_qdq", "quark_qdq"],
           "latency": {"runs": 5, "min_runs": 3, "budget_seconds": 5},
           "advice": {"budget_seconds": 20}, "layers": {"max_seconds": 20}}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tools")
    fp32 = build("conv_gap_gemm")
    onnx.save(fp32, folder / "fp32.onnx")
    onnx.save(per_tensor_qdq_around(fp32, {"conv1", "fc"}), folder / "mine.onnx")
    mp = pytest.MonkeyPatch()
    mp.setenv("QUANTCOMPARE_TOOLS_ROOT", str(folder / "no_tools"))
    try:
        report = run_comparison(ComparisonRequest(
            model_path=folder / "fp32.onnx", model_name="fp32.onnx", options=ComparisonOptions.model_validate(OPTIONS),
            artifact_paths={"mine": folder / "mine.onnx"}), folder / "job")
    finally:
        mp.undo()
    return report, folder / "job"


def test_nncf_path_records_its_tool_in_the_report_and_in_the_file(job):
    report, workdir = job
    art = report.artifacts["nncf_qdq"]
    assert art.status == "ok", art.error
    assert art.tool.version == "3.4.0" and "NNCF" in art.tool.name
    assert art.file.metadata_props["quantcompare.tool_version"] == "3.4.0"
    assert art.file.metadata_props["quantcompare.preset"] == "matched"
    # what matched cannot reach with NNCF, said in tool.settings
    assert any("uint8" in s for s in art.tool.settings["not_matched"])
    written = onnx.load(str(workdir / "artifacts" / "nncf_qdq.onnx"), load_external_data=False)
    assert {p.key: p.value for p in written.metadata_props}["quantcompare.tool"] == art.tool.name
    # uint8 after the ReLU (its hardware config), where ORT's matched file is int8 throughout
    assert "uint8" in art.quantization.activation_dtypes
    assert "uint8" not in report.artifacts["ort_qdq"].quantization.activation_dtypes
    # NNCF keeps the bias float (ORT writes int32): the inventory reads it from the file
    assert report.artifacts["ort_qdq"].quantization.bias_summary != art.quantization.bias_summary


def test_nncf_and_ort_figures_come_from_the_same_evaluation_samples(job):
    """One SQNR per path recomputed from the files on the samples the job's options make: both match the report."""
    report, workdir = job
    fp32 = onnx.load(str(workdir.parent / "fp32.onnx"))
    specs = input_specs_from_onnx(fp32)
    options = ComparisonOptions.model_validate(OPTIONS)
    feeds = generated_samples(specs, {"x": (1, 3, 32, 32)}, options).evaluation

    def outputs(path):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return np.concatenate([session.run(None, feed)[0] for feed in feeds])

    reference = outputs(workdir.parent / "fp32.onnx")
    for name in ("nncf_qdq", "ort_qdq", "mine"):
        ours = sqnr_db(reference, outputs(workdir / "artifacts" / f"{name}.onnx"))
        assert report.artifacts[name].optimized["disable_all"].numerics.worst_sqnr_db == pytest.approx(ours, abs=1e-3)
    # and the NNCF file is not ORT's: the two figures differ
    assert abs(report.artifacts["nncf_qdq"].optimized["disable_all"].numerics.worst_sqnr_db
               - report.artifacts["ort_qdq"].optimized["disable_all"].numerics.worst_sqnr_db) > 0.05


@pytest.mark.parametrize("name", ["modelopt_qdq", "quark_qdq"])
def test_a_missing_tool_skips_its_path_with_the_command_that_installs_it(job, name):
    report, _ = job
    art = report.artifacts[name]
    assert art.status == "skipped" and art.error.code == "tool_unavailable"
    assert "make tools" in art.error.hint
    assert report.artifacts["ort_qdq"].status == "ok"  # the rest of the job is unchanged


@pytest.mark.parametrize("name", ["nncf_qdq", "mine"])
def test_each_new_artifact_gets_every_section(job, name):
    report, _ = job
    art = report.artifacts[name]
    assert art.status == "ok", art.error
    assert art.quantization.quantize_linear > 0  # inventory
    assert set(art.optimized) == {"disable_all", "basic", "extended", "layout", "all"}  # level graphs
    top = art.optimized["all"]
    assert top.numerics is not None and top.numerics.worst_sqnr_db > 20  # accuracy
    assert top.latency is not None and top.latency.median_ms > 0  # latency
    assert isinstance(top.unfused, list)  # blockers (mine leaves Flatten/GAP float: rows)
    rows = [r for r in report.layers.rows if name in r.artifacts]  # per-tensor error, aligned by tensor name
    assert any(r.tensor == "c2" for r in rows)
    assert any(name in (row.a, row.b) for row in report.agreement)  # against each other artifact
    assert any(name in d.where for d in report.decisions)  # decisions table


@pytest.mark.parametrize("name", ["nncf_qdq", "modelopt_qdq", "mine"])
def test_advice_offers_the_session_switch_for_a_file_it_cannot_make_again(name):
    """A tool's or a brought file is not re-quantized here; an int8 activation ORT leaves float on x86 gets ORT's
    session switch as its candidate, as PT2E's file does. ORT's own paths get their re-quantizations instead."""
    from service.pipeline.advice.advice import candidates_from_blockers
    from service.schemas.advice import UnfusedNode

    row = UnfusedNode(node="conv1", op_type="Conv", blocker="int8_activation_on_x86", detail="int8 in", fix="uint8")
    made = candidates_from_blockers({name: [row], "ort_qdq": []}, {}, ort_settings={"activation_type": "int8"},
                                    int8_allowed=False)
    assert [(c.artifact, c.change) for c in made] == [(name, {"session": {"session.qdqisint8allowed": "1"}})]
    other = UnfusedNode(node="gap", op_type="GlobalAveragePool", blocker="no_qdq_in_file", detail="", fix="")
    assert candidates_from_blockers({name: [other]}, {}, ort_settings={}, int8_allowed=False) == []


def test_a_brought_file_is_named_by_what_it_says_of_itself(job):
    report, _ = job
    tool = report.artifacts["mine"].tool
    assert tool.producer.startswith("othertool 9.9")
    assert "Q/DQ in ai.onnx x" in tool.producer
    blocked = {r.op_type for r in report.artifacts["mine"].optimized["all"].unfused}
    assert "GlobalAveragePool" in blocked  # left float by its maker: the blockers say so


def test_another_model_is_refused_with_artifact_mismatch(tmp_path):
    fp32 = build("conv_gap_gemm")
    onnx.save(fp32, tmp_path / "fp32.onnx")
    onnx.save(renamed_input(per_tensor_qdq_around(fp32, {"conv1"}), "images", elem=onnx.TensorProto.FLOAT16),
              tmp_path / "other.onnx")
    request = ComparisonRequest(model_path=tmp_path / "fp32.onnx", options=ComparisonOptions.model_validate(
        {"artifacts": ["ort_qdq"], "depth": "structure"}), artifact_paths={"other": tmp_path / "other.onnx"})
    with pytest.raises(ArtifactMismatch) as refused:
        run_comparison(request, tmp_path / "job")
    assert "input 'x' of the fp32 model is missing" in refused.value.details["differences"]
    assert any("'images'" in d for d in refused.value.details["differences"])
    assert not (tmp_path / "job" / "artifacts" / "ort_qdq.onnx").exists()  # refused before any path ran


def test_no_builtin_path_and_no_brought_file_is_refused(tmp_path):
    onnx.save(build("conv_gap_gemm"), tmp_path / "fp32.onnx")
    request = ComparisonRequest(model_path=tmp_path / "fp32.onnx",
                                options=ComparisonOptions.model_validate({"artifacts": []}))
    with pytest.raises(InvalidOptions, match="nothing to compare"):
        run_comparison(request, tmp_path / "job")


def test_artifacts_empty_compares_only_the_brought_files(tmp_path):
    fp32 = build("conv_gap_gemm")
    onnx.save(fp32, tmp_path / "fp32.onnx")
    onnx.save(per_tensor_qdq_around(fp32, {"conv1"}), tmp_path / "mine.onnx")
    report = run_comparison(ComparisonRequest(
        model_path=tmp_path / "fp32.onnx", options=ComparisonOptions.model_validate(
            {"artifacts": [], "depth": "structure"}), artifact_paths={"mine": tmp_path / "mine.onnx"}), tmp_path / "job")
    assert set(report.artifacts) == {"fp32", "mine"}


def test_a_gate_on_a_name_the_job_neither_makes_nor_brings_is_refused():
    """Gate names are open (a brought file may be called anything); a misspelt one is refused against the job's."""
    from service.pipeline.quantize.tools.brought import refuse_unknown_artifacts
    from service.pipeline.verdict.gates import gate_from_string

    options = ComparisonOptions.model_validate({"artifacts": ["ort_qdq"],
                                                "gates": [gate_from_string("mine.all.sqnr_db>=20")]})
    refuse_unknown_artifacts(options, {"mine": None})
    with pytest.raises(InvalidOptions, match="'mine'"):
        refuse_unknown_artifacts(options, {"yours": None})
    refuse_unknown_artifacts(ComparisonOptions.model_validate(  # a built-in path not run: fails its gate, as before
        {"artifacts": ["ort_qdq"], "gates": [gate_from_string("pt2e_qdq.all.sqnr_db>=20")]}), {})


def test_the_new_artifacts_are_compared_on_arm64_too(tmp_path):
    """The platforms section: a tool path's file and a brought file as the emulated arm64 ORT makes them."""
    from service.pipeline.ort.targets import host_platform
    from service.pipeline.platforms.sysroot import default_root, ready_file

    if host_platform().int8_allowed:
        pytest.skip("this machine is ARM: nothing is emulated")
    if not ready_file(default_root()).exists():
        pytest.skip("the arm64 runtime is not set up (run `make arm64`)")
    fp32 = build("conv_gap_gemm")
    onnx.save(fp32, tmp_path / "fp32.onnx")
    onnx.save(per_tensor_qdq_around(fp32, {"conv1", "fc"}), tmp_path / "mine.onnx")
    report = run_comparison(ComparisonRequest(
        model_path=tmp_path / "fp32.onnx", artifact_paths={"mine": tmp_path / "mine.onnx"},
        options=ComparisonOptions.model_validate({
            "artifacts": ["nncf_qdq"], "levels": ["disable_all", "extended"], "calibration_samples": 4,
            "eval_samples": 3, "latency": {"enabled": False}, "advice": {"enabled": False},
            "layers": {"enabled": False}, "platforms": ["arm64"]})), tmp_path / "job")
    arm = report.platforms["arm64"]
    assert arm.status == "ok"
    for name in ("nncf_qdq", "mine"):
        assert set(arm.optimized[name]) == {"disable_all", "extended"}
        assert arm.optimized[name]["extended"].numerics is not None
        assert any(r.artifact == name for r in arm.side_by_side)
