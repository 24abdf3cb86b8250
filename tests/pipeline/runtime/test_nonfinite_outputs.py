"""Outputs with inf or NaN: a log-mel front end whose small energies quantize to 0 gives Log(0) = -inf
(onnx-asr's Kaldi/NeMo/GigaAM preprocessors after ORT's quantize_static). The job stopped with
'internal_error: ValueError: math domain error' in the SQNR, and where it did not, NaN sums became a
silent -200 dB. Now: positions where both hold the same non-finite value agree, any other is counted
(``nonfinite``), the SQNR is the floor, and the lint ``nonfinite_outputs`` names the output."""
from __future__ import annotations

import numpy as np
import pytest

from service.pipeline.runtime.numerics import (
    SQNR_FLOOR,
    cosine,
    max_abs_error,
    nonfinite_mismatches,
    sqnr_db,
    sqnr_from_sums,
)

REF = np.array([1.0, 2.0, -np.inf, 4.0], np.float32)


def test_the_same_non_finite_value_in_both_agrees():
    got = np.array([1.0, 2.5, -np.inf, 4.0], np.float32)
    assert nonfinite_mismatches(REF, got) == 0
    assert sqnr_db(REF, got) == pytest.approx(10 * np.log10((1 + 4 + 16) / 0.25))
    assert max_abs_error(REF, got) == pytest.approx(0.5) and 0.99 < cosine(REF, got) < 1.0


@pytest.mark.parametrize("bad", [-np.inf, np.nan, np.inf], ids=["-inf", "nan", "+inf"])
def test_a_non_finite_value_where_fp32_has_a_number_is_counted_and_fails_every_gate(bad):
    ref = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    got = np.array([1.0, bad, 3.0, 4.0], np.float32)
    assert nonfinite_mismatches(ref, got) == 1
    assert sqnr_db(ref, got) == SQNR_FLOOR and cosine(ref, got) == 0.0
    assert max_abs_error(ref, got) == 0.0  # the finite positions agree exactly


def test_a_ratio_that_underflows_is_the_floor_not_a_math_error():
    assert sqnr_from_sums(1e-300, 1e300) == SQNR_FLOOR
    assert sqnr_from_sums(0.0, 1.0) == SQNR_FLOOR and sqnr_from_sums(1.0, 0.0) is None


def test_integer_outputs_have_no_non_finite_values():
    assert nonfinite_mismatches(np.array([1, 2]), np.array([1, 3])) == 0


def test_the_per_tensor_table_counts_them_too():
    from service.pipeline.layers.layers import Located, _Acc, _Ref

    acc = _Acc()
    loc = Located("t", "name", False, None, None, None, None)
    acc.add(_Ref(np.array([1.0, 2.0, 3.0], np.float32)), np.array([1.0, -np.inf, 3.0], np.float32), loc)
    acc.add(_Ref(np.array([1.0, 2.0, 3.0], np.float32)), np.array([1.0, 2.0, 3.5], np.float32), loc)
    cell = acc.cell()
    assert cell.nonfinite == 1 and cell.sqnr_db == SQNR_FLOOR and cell.cosine == 0.0
    assert cell.max_abs_error == pytest.approx(0.5)


def _log_energy_model(path) -> None:
    """x -> x*x -> MatMul (a filter bank) -> Log: the shape of a log-mel front end."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    bank = np.abs(np.random.default_rng(0).standard_normal((64, 16))).astype(np.float32) / 64
    nodes = [helper.make_node("Mul", ["x", "x"], ["energy"], name="square"),
             helper.make_node("MatMul", ["energy", "bank"], ["mel"], name="bank"),
             helper.make_node("Log", ["mel"], ["y"], name="log")]
    graph = helper.make_graph(nodes, "logmel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 50, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 50, 16])],
                              [numpy_helper.from_array(bank, "bank")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_quantized_log_of_zero_is_reported_not_a_crash(tmp_path):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    (tmp_path / "input").mkdir()
    model = tmp_path / "input" / "model.onnx"
    _log_energy_model(model)
    # one sample whose first frames are near silence: their energies quantize to 0
    x = np.random.default_rng(1).standard_normal((3, 1, 50, 64)).astype(np.float32)
    x[:, :, :10] *= 1e-3
    np.savez(tmp_path / "calib.npz", x=x)
    gates = [{"artifact": "ort_qdq", "level": "all", "metric": m, "op": op, "value": v}
             for m, op, v in (("max_abs_error", "<=", 1e6), ("sqnr_db", ">=", -100.0), ("cosine", ">=", 0.5))]
    options = ComparisonOptions(artifacts=["ort_qdq"], levels=["disable_all", "all"], calibration_samples=2,
                                eval_samples=1, latency={"enabled": False}, advice={"enabled": False}, gates=gates)
    report = run_comparison(ComparisonRequest(options=options, model_path=model, model_name="logmel",
                                              calibration_path=tmp_path / "calib.npz"), tmp_path)
    numerics = report.artifacts["ort_qdq"].optimized["all"].numerics
    assert numerics.outputs[0].nonfinite > 0 and numerics.worst_sqnr_db == SQNR_FLOOR
    # every accuracy gate fails, however loose: the max abs error figure itself covers finite values only
    assert [g.passed for g in report.verdict.gates] == [False, False, False]
    assert "inf or NaN" in report.verdict.gates[0].message
    assert "fp32_output_nonfinite" not in {x.code for x in report.lints}  # fp32 itself is finite here
    lint = next(x for x in report.lints if x.code == "nonfinite_outputs")
    assert lint.artifact == "ort_qdq" and lint.severity == "error" and "'y'" in lint.message
    # the per-tensor table shows where they start: the Log's output, not the MatMul's
    rows = {r.tensor: r for r in report.layers.rows}
    assert rows["y"].artifacts["ort_qdq"].nonfinite > 0 and rows["mel"].artifacts["ort_qdq"].nonfinite == 0


def test_an_fp32_output_with_nan_on_the_samples_is_flagged():
    """A Log of generated normal values: half of fp32's own output is NaN, which every quantized file
    matches there; the figures then cover the finite half only, and the lint says so."""
    from service.pipeline.verdict.reference_noise import nonfinite_reference_lints

    finite, half_nan = np.ones((2, 4), np.float32), np.log(np.array([[1.0, -1.0], [2.0, -3.0]], np.float32))
    lints = nonfinite_reference_lints({}, [finite, half_nan, np.array([1, 2])])
    assert [(x.code, x.artifact) for x in lints] == [("fp32_output_nonfinite", "fp32")]
    assert "'#1' holds 2 inf or NaN values of 4" in lints[0].message
