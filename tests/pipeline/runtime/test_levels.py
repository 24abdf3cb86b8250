"""The levels stage on a conv+relu quantized three ways, built here with the real toolchain
(torchao PT2E + torch.onnx.export, onnxruntime quantize_static QDQ and QOperator).

What is pinned is what this machine (x86-64) does; the chapter in shared/seeds measured arm64,
where ORT keeps int8 activations (QDQIsInt8Allowed) instead of converting them to uint8.
"""

from __future__ import annotations

import platform
import warnings
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from service.pipeline.runtime.levels import LevelsInput, LevelsRun, analyze_levels
from service.pipeline.verdict.decide import decided_from_levels
from service.render.levels_text import levels_summary_lines
from tests.cpu import U8S8_SATURATES, cosine_floor, int8_kernels_exact, sqnr_floor
from service.schemas.options import LEVELS, ComparisonOptions

X86 = platform.machine() in ("x86_64", "AMD64")
x86_only = pytest.mark.skipif(not X86, reason="pins ORT's x86 behaviour (int8 -> uint8, NCHWc)")


def _build_artifacts(d):
    import torch
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
    from torch.export import Dim, export
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    torch.manual_seed(0)

    class ConvRelu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.relu = torch.nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv(x))

    model = ConvRelu().eval()
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((2, 3, 16, 16)).astype(np.float32) for _ in range(8)]
    x = torch.from_numpy(calib[0])
    dyn = ({0: Dim("batch")},)  # batch 2: an example batch of 1 would specialize the dynamic dim
    paths = {}
    with torch.no_grad():
        paths["fp32"] = d / "fp32.onnx"
        torch.onnx.export(model, (x,), dynamo=True, verbose=False, dynamic_shapes=dyn).save(str(paths["fp32"]))
        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(export(model, (x,), dynamic_shapes=dyn).module(), quantizer)
        for c in calib:
            prepared(torch.from_numpy(c))
        paths["pt2e_qdq"] = d / "pt2e_qdq.onnx"
        torch.onnx.export(convert_pt2e(prepared), (x,), dynamo=True, verbose=False,
                          dynamic_shapes=dyn).save(str(paths["pt2e_qdq"]))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": c} for c in calib])

        def get_next(self):
            return next(self.it, None)

    for fmt, name in ((QuantFormat.QDQ, "ort_qdq"), (QuantFormat.QOperator, "ort_qoperator")):
        paths[name] = d / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_static(str(paths["fp32"]), str(paths[name]), Reader(), quant_format=fmt, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                            calibrate_method=CalibrationMethod.MinMax,
                            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
    return paths


@pytest.fixture(scope="module")
def conv_relu_levels(tmp_path_factory):
    d = tmp_path_factory.mktemp("levels_conv_relu")
    paths = _build_artifacts(d)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    seen = []
    options = ComparisonOptions(latency={"runs": 3, "warmup": 1, "intra_op_threads": 1}, attribution=True)
    levels = analyze_levels(LevelsInput(artifact_paths=paths, eval_feeds=feeds, options=options),
                            LevelsRun(out_dir=d / "out", progress=lambda stage, done, total: seen.append((stage, done, total))))
    decided = decided_from_levels(levels, inventories={}, options=options)
    # The levels results with what the decide stage reads from them.
    result = SimpleNamespace(**vars(levels), decisions=decided.decisions, lints=decided.lints)
    return result, d / "out", seen


def _ops(result, artifact, level):
    return result.optimized[artifact][level].op_histogram


def test_every_artifact_has_every_level_and_the_graph_file(conv_relu_levels):
    result, out, seen = conv_relu_levels
    assert list(result.optimized) == ["fp32", "pt2e_qdq", "ort_qdq", "ort_qoperator"]
    for name, per_level in result.optimized.items():
        assert list(per_level) == list(LEVELS)
        for level, ol in per_level.items():
            assert ol.error is None
            assert ol.file == f"{name}.{level}.onnx"
            assert len(onnx.load(str(out / ol.file)).graph.node) == ol.node_count
    last = {stage: (done, total) for stage, done, total in seen}
    # 20 level graphs made and run for accuracy; latency at "all" alone (options.latency_levels), 4 graphs
    assert last == {"optimize": (20, 20), "evaluate": (20, 20), "latency": (4, 4)}
    assert set(result.timings) == {"optimize", "evaluate", "latency"}


def test_pt2e_file_runs_float_conv_until_extended(conv_relu_levels):
    result, _, _ = conv_relu_levels
    assert _ops(result, "pt2e_qdq", "disable_all") == {"DequantizeLinear": 3, "QuantizeLinear": 2, "Conv": 1, "Relu": 1}
    basic = result.optimized["pt2e_qdq"]["basic"]
    assert basic.int8_coverage == 0.0 and basic.bias.summary == "int32"  # WeightBiasQuantization
    assert [r.summary for r in basic.diff.rewrites] == [
        "bias quantized to int32 (DequantizeLinear of int32 initializer added)"]
    assert basic.diff.rewrites[0].transformer == "WeightBiasQuantization"
    assert basic.diff.rewrites[0].confirmed is True


@x86_only
@pytest.mark.parametrize("artifact,fused", [
    ("pt2e_qdq", "DequantizeLinear x3 + Conv + Relu + QuantizeLinear -> QLinearConv (int8 activations run as uint8)"),
    ("ort_qdq", "DequantizeLinear x3 + Conv + QuantizeLinear -> QLinearConv"),
])
def test_qdq_files_become_qlinearconv_with_uint8_activations_at_extended_on_x86(conv_relu_levels, artifact, fused):
    result, _, _ = conv_relu_levels
    ext = result.optimized[artifact]["extended"]
    assert ext.op_histogram == {"QuantizeLinear": 1, "QLinearConv": 1, "DequantizeLinear": 1}
    assert ext.int8_coverage == 1.0 and ext.compute_ops_fp32 == 1
    assert ext.kernel_activation_dtypes == {"uint8": 1}
    summaries = [r.summary for r in ext.diff.rewrites]
    assert fused in summaries
    s8u8 = next(r for r in ext.diff.rewrites if r.kind == "s8_to_u8")
    assert s8u8.summary == "activations int8 -> uint8 (QuantizeLinear + DequantizeLinear rewritten)"
    assert s8u8.confirmed_by == ["QDQS8ToU8Transformer"]
    fusion = next(r for r in ext.diff.rewrites if r.kind == "qdq_fusion")
    assert "QDQSelectorActionTransformer" in fusion.confirmed_by


@x86_only
@pytest.mark.parametrize("artifact", ["pt2e_qdq", "ort_qdq", "ort_qoperator"])
def test_layout_runs_nhwc_qlinearconv_between_transposes(conv_relu_levels, artifact):
    result, _, _ = conv_relu_levels
    for level in ("layout", "all"):
        ol = result.optimized[artifact][level]
        assert ol.op_histogram == {"QuantizeLinear": 1, "Transpose": 2, "com.microsoft.QLinearConv": 1,
                                   "DequantizeLinear": 1}
        assert ol.layout.nhwc_nodes == 1 and ol.layout.transposes_inserted == 2
        assert ol.int8_coverage == 1.0
    rw = result.optimized[artifact]["layout"].diff.rewrites
    assert [r.summary for r in rw] == ["QLinearConv -> Transpose x2 + com.microsoft.QLinearConv (NHWC)"]
    assert rw[0].confirmed_by == ["NhwcTransformer"]
    assert result.optimized[artifact]["all"].diff.rewrites == []


@x86_only
def test_qoperator_file_keeps_int8_activations_and_is_linted(conv_relu_levels):
    result, _, _ = conv_relu_levels
    ol = result.optimized["ort_qoperator"]["disable_all"]
    assert ol.int8_coverage == 1.0 and ol.kernel_activation_dtypes == {"int8": 1}
    assert [lint.code for lint in result.lints if lint.artifact == "ort_qoperator"] == ["qoperator_int8_activations_x86"]


def test_the_saturation_lint_follows_this_cpu(conv_relu_levels):
    """The u8s8 lint is raised exactly on the CPUs /proc/cpuinfo says saturate (tests/cpu.py), and there
    the fused level really loses accuracy that the unfused level keeps."""
    result, _, _ = conv_relu_levels
    linted = {lint.artifact for lint in result.lints if lint.code == "u8s8_saturation_without_vnni"}
    assert ("ort_qdq" in linted) is U8S8_SATURATES
    if U8S8_SATURATES:
        fused = result.optimized["ort_qdq"]["all"].numerics.worst_sqnr_db
        unfused = result.optimized["ort_qdq"]["basic"].numerics.worst_sqnr_db
        assert fused < unfused - 6, (fused, unfused)


@x86_only
def test_fp32_gets_fusedconv_then_nchwc_on_x86(conv_relu_levels):
    result, _, _ = conv_relu_levels
    assert _ops(result, "fp32", "extended") == {"com.microsoft.FusedConv": 1}
    layout = result.optimized["fp32"]["layout"]
    assert layout.layout.nchwc_nodes >= 1 and "com.microsoft.nchwc.Conv" in layout.op_histogram
    assert layout.diff.rewrites[0].kind == "nchwc" and layout.diff.rewrites[0].transformer == "NchwcTransformer"


def test_numerics_against_fp32_and_between_levels(conv_relu_levels):
    result, _, _ = conv_relu_levels
    ref = result.optimized["fp32"]["disable_all"].numerics
    assert ref.worst_sqnr_db is None and ref.worst_cosine == pytest.approx(1.0)  # the reference itself
    for name in ("pt2e_qdq", "ort_qdq", "ort_qoperator"):
        for level, ol in result.optimized[name].items():
            n = ol.numerics
            assert n.samples == 4 and len(n.outputs) == 1
            assert n.worst_sqnr_db > sqnr_floor(level), (name, level, n.worst_sqnr_db)
            assert n.worst_cosine > cosine_floor(level)
            assert n.outputs[0].output_step > 0
            if level != "disable_all" and int8_kernels_exact(level):
                # ORT's rewrites move an output by at most a couple of quantization steps
                assert n.outputs[0].drift_steps <= 2.0, (name, level, n.outputs[0].drift_steps)


def test_latency_is_recorded_with_fixed_threads(conv_relu_levels):
    result, _, _ = conv_relu_levels
    for per_level in result.optimized.values():
        for level, ol in per_level.items():
            if level != "all":  # options.latency_levels: ["all"], the default
                assert ol.latency is None and "options.latency_levels" in ol.not_measured["latency"]
                continue
            assert ol.latency.runs == 3 and ol.latency.intra_op_threads == 1
            assert 0 < ol.latency.median_ms <= ol.latency.p90_ms


def test_agreement_rows_between_quantized_artifacts(conv_relu_levels):
    result, _, _ = conv_relu_levels
    pairs = [(r.a, r.b) for r in result.agreement]
    assert pairs == [("pt2e_qdq", "ort_qdq"), ("pt2e_qdq", "ort_qoperator"), ("ort_qdq", "ort_qoperator")]
    for r in result.agreement:
        # None = bitwise identical (infinite SQNR): ort_qdq and ort_qoperator share calibration and
        # settings, and at level all both run the same NHWC QLinearConv
        assert r.level == "all" and (r.sqnr_db is None or r.sqnr_db > sqnr_floor("all", clean=25))
        assert 0 <= r.equal_share <= 1 and r.max_diff_steps is not None


def test_decisions_say_where_each_tool_decides(conv_relu_levels):
    result, _, _ = conv_relu_levels
    rows = {r.decision: r.where for r in result.decisions}
    assert rows["bias to int32"] == {"pt2e_qdq": "at session level basic", "ort_qdq": "in the file",
                                     "ort_qoperator": "in the file"}
    assert rows["Relu/Clip absorbed into QuantizeLinear"] == {
        "pt2e_qdq": "at session level extended", "ort_qdq": "in the file", "ort_qoperator": "in the file"}
    assert rows["int8 kernel choice"]["pt2e_qdq"] == "at session level extended (QLinearConv)"
    assert rows["int8 kernel choice"]["ort_qoperator"] == "in the file (QLinearConv)"
    assert set(rows["per-channel weights"].values()) == {"in the file: per-channel"}
    assert set(rows["symmetric weights"].values()) == {"in the file: symmetric"}
    assert rows["Conv+BatchNorm folding"]["pt2e_qdq"].startswith("n/a")
    assert set(rows["ops left in float"].values()) == {"none"}
    if X86:
        assert rows["activation dtype (as run)"]["pt2e_qdq"] == \
            "uint8 from session level extended (QDQS8ToU8Transformer)"
        assert rows["activation dtype (as run)"]["ort_qoperator"] == "int8 as written"


def test_levels_result_fits_the_report_schema(conv_relu_levels):
    from service.schemas.report import Artifact

    result, _, _ = conv_relu_levels
    art = Artifact(name="pt2e_qdq", status="ok", optimized=result.optimized["pt2e_qdq"])
    again = Artifact.model_validate_json(art.model_dump_json())
    assert again.optimized["extended"].op_histogram == result.optimized["pt2e_qdq"]["extended"].op_histogram


def test_attribution_off_by_default_leaves_rewrites_unchecked(tmp_path, conv_relu_levels):
    result, out, _ = conv_relu_levels
    paths = {"fp32": out.parent / "fp32.onnx", "ort_qdq": out.parent / "ort_qdq.onnx"}
    feeds = [{"x": np.zeros((2, 3, 16, 16), np.float32)}]
    options = ComparisonOptions(levels=["disable_all", "extended"], latency={"enabled": False})
    r = analyze_levels(LevelsInput(artifact_paths=paths, eval_feeds=feeds, options=options), LevelsRun(out_dir=tmp_path))
    assert list(r.optimized["ort_qdq"]) == ["disable_all", "extended"]
    ext = r.optimized["ort_qdq"]["extended"]
    assert ext.latency is None and ext.diff.previous == "disable_all"
    assert all(rw.confirmed is None for rw in ext.diff.rewrites)
    assert r.agreement == []  # one quantized artifact: nothing to agree with


def test_summary_lines_fit_one_screen(conv_relu_levels):
    from types import SimpleNamespace

    from service.schemas.report import Artifact

    result, _, _ = conv_relu_levels
    report = SimpleNamespace(
        artifacts={n: Artifact(name=n, status="ok", optimized=p) for n, p in result.optimized.items()},
        decisions=result.decisions, lints=result.lints)
    lines = levels_summary_lines(report)
    assert len(lines) <= 24 and max(len(x) for x in lines) <= 160
    assert lines[0].startswith("levels") and "disable_all" in lines[0]
    assert any(x.startswith("pt2e_qdq") for x in lines)
    assert any(x.startswith("bias to int32") for x in lines)


@pytest.mark.parametrize("median_ms", [0.05, 1116.26, 123456789.5], ids=["sub-ms", "four digits", "nine digits"])
def test_summary_columns_stay_aligned_for_any_width(conv_relu_levels, median_ms):
    """Seen: 'exact | 1116.26exact | 1120.96' when a cell outgrew a fixed 15-char column."""
    from types import SimpleNamespace

    from service.schemas.report import Artifact

    result, _, _ = conv_relu_levels
    wide = {}
    for name, per_level in result.optimized.items():
        wide[name] = {lv: ol.model_copy(update={"latency": ol.latency.model_copy(update={"median_ms": median_ms})})
                      if ol.latency else ol for lv, ol in per_level.items()}
    report = SimpleNamespace(artifacts={n: Artifact(name=n, status="ok", optimized=p) for n, p in wide.items()},
                             decisions=result.decisions, lints=[])
    lines = levels_summary_lines(report)
    header = lines[0].split("  (")[0]
    levels = header.split()[1:]
    starts, at = [], 0
    for lv in levels:  # "all" is also inside "disable_all": search after the previous column
        at = header.index(" " + lv, at) + 1
        starts.append(at)
    for row in lines[1:1 + len(wide)]:
        cells = [row[s:e].strip() for s, e in zip(starts, starts[1:] + [None])]
        assert len(cells) == len(levels)
        for cell in cells:  # every cell holds exactly one level's value, and a gap before the next
            assert cell.count("|") <= 1, row
            if "|" in cell:
                assert cell.split("|")[1].strip().removesuffix("~") == f"{median_ms:.2f}", row  # "~": noisy
        for s in starts[1:]:
            assert row[s - 1] == " " and row[s - 2] == " ", row


@x86_only
@pytest.mark.parametrize("entry", [None, "1"], ids=["ORT's default", "session.qdqisint8allowed=1"])
def test_ort_session_reaches_every_session_of_the_stage_and_the_blockers_read_it(tmp_path, entry):
    """options.ort_session is set on the level graph's, the timed and the profiled session (a QDQ Conv with int8
    activations fuses to QLinearConv only with the entry; the accuracy runs' are pinned by the recipe re-run
    test in tests/pipeline/advice/test_recipe.py, whose SQNR they give), and the blockers read
    the int8 rule it gives: with uint8 weights the Conv stays float for its weights, not for int8 on x86."""
    from tests.pipeline.inspect.test_blockers import conv_model

    config = {} if entry is None else {"session.qdqisint8allowed": entry}
    options = ComparisonOptions.model_validate({
        "levels": ["disable_all", "extended"], "latency_levels": ["extended"], "ort_session": config,
        "latency": {"runs": 2, "min_runs": 1, "warmup": 0, "budget_seconds": 0}})
    paths = {w: conv_model(tmp_path, name=w, in_dtype="int8", out_dtype="int8", in_readers=2, out_readers=2,
                           weight_dtype=w) for w in ("int8", "uint8")}
    feeds = [{"x": np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)}]
    r = analyze_levels(LevelsInput(artifact_paths=paths, eval_feeds=feeds, options=options), LevelsRun(out_dir=tmp_path))
    fused, wrong_weights = r.optimized["int8"]["extended"], r.optimized["uint8"]["extended"]
    assert ("QLinearConv" in fused.int8_kernels) == (entry == "1")
    assert ("QLinearConv" in fused.profile.by_op_type) == (entry == "1")
    conv = next(u for u in wrong_weights.unfused if u.node == "conv")
    assert conv.blocker == ("weight_dtype_mismatch" if entry == "1" else "int8_activation_on_x86")


@x86_only
def test_side_by_side_says_when_the_jobs_ort_session_decides_the_int8_rule_here(tmp_path):
    """A platform whose selectors take int8 activations (arm64's rule; here ORT's own graphs with the entry,
    which gives the selectors that behaviour): against this machine's default the row names QDQIsInt8Allowed();
    against a job that set session.qdqisint8allowed=0 it names the entry too; against one that set "1" nothing
    differs."""
    from service.pipeline.ort.targets import host_platform
    from service.pipeline.platforms.side_by_side import side_by_side_rows
    from service.schemas.platforms import PlatformReport, PlatformRules
    from tests.pipeline.inspect.test_blockers import conv_model

    path = conv_model(tmp_path, in_dtype="int8", out_dtype="int8", in_readers=2, out_readers=2)

    def optimized(config):
        options = ComparisonOptions.model_validate({"levels": ["extended"], "depth": "structure", "ort_session": config})
        return analyze_levels(LevelsInput(artifact_paths={"mine": path}, eval_feeds=[], options=options),
                              LevelsRun(out_dir=tmp_path / config.get("session.qdqisint8allowed", "default"))).optimized

    allowed = {"session.qdqisint8allowed": "1"}
    other = PlatformReport(name="int8-allowed", arch="aarch64", emulated=False, cpu="-", status="ok",
                           rules=PlatformRules(int8_allowed=True, nchwc=False), optimized=optimized(allowed))
    (default,) = side_by_side_rows(optimized({}), host_platform(), other)
    assert not default.same and default.rules[0].startswith("QDQIsInt8Allowed(): false here, true on int8-allowed")
    off = {"session.qdqisint8allowed": "0"}
    (zero,) = side_by_side_rows(optimized(off), host_platform(), other, off)
    assert zero.rules[0].startswith("QDQIsInt8Allowed(): false by session.qdqisint8allowed=0 in this job's sessions "
                                    "(false by default) here, true on int8-allowed")
    (one,) = side_by_side_rows(optimized(allowed), host_platform(), other, allowed)
    assert one.same and not one.rules
