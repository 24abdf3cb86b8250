"""Input shapes and the shared samples: the errors name what to fix, and every path gets the same data."""

from __future__ import annotations

import numpy as np
import pytest

from service.errors import InputShapeRequired, InvalidCalibration, InvalidOptions
from service.schemas.options import ComparisonOptions
from service.pipeline.inputs.samples import generated_samples, samples_from_npz
from service.pipeline.inputs.specs import InputSpec, resolved_input_shapes
from tests import models

IMG = InputSpec("image", "float32", ("batch", 3, "height", "width"))
TOKENS = InputSpec("tokens", "int64", ("N", "seq"))


def test_a_symbolic_batch_defaults_to_one_and_the_report_says_so():
    shapes, notes = resolved_input_shapes([InputSpec("x", "float32", ("batch", 3, 8, 8))], {})
    assert shapes == {"x": (1, 3, 8, 8)}
    assert any("batch" in n for n in notes)


def test_missing_dims_are_all_named_with_the_option_to_pass():
    with pytest.raises(InputShapeRequired) as e:
        resolved_input_shapes([IMG, TOKENS], {})
    err = e.value
    assert err.code == "input_shape_required"
    assert err.details["dims"] == ["image[2] (height)", "image[3] (width)", "tokens[1] (seq)"]
    assert '"input_shapes"' in err.hint and '"image"' in err.hint and '"tokens"' in err.hint


@pytest.mark.parametrize("given, needle", [
    ({"image": [1, 3, 8]}, "rank"),
    ({"image": [1, 4, 8, 8]}, "fixes it at 3"),
    ({"imgae": [1, 3, 8, 8]}, "does not have"),
], ids=["wrong rank", "fixed dim changed", "misspelt input"])
def test_bad_input_shapes_are_refused_with_the_reason(given, needle):
    with pytest.raises(InvalidOptions, match=needle):
        resolved_input_shapes([IMG], given)


def test_the_wrong_rank_hint_gives_a_shape_built_from_the_values_given():
    """The hint's example filled every symbolic dim with 1: for MTCNN's P-Net (batch, h, w, 3 from
    tf2onnx) given [48, 48, 3], it offered [1, 1, 1, 3], which the net cannot run."""
    pnet = InputSpec("input_1", "float32", ("unk__batch", "unk__h", "unk__w", 3))
    with pytest.raises(InvalidOptions, match="has 3 dims but the input has rank 4") as e:
        resolved_input_shapes([pnet], {"input_1": [48, 48, 3]})
    assert e.value.hint.endswith('{"input_shapes": {"input_1": [1, 48, 48, 3]}}')
    with pytest.raises(InvalidOptions) as e:  # one leading 1 too many
        resolved_input_shapes([pnet], {"input_1": [1, 1, 48, 48, 3]})
    assert e.value.hint.endswith('[1, 48, 48, 3]}}')
    with pytest.raises(InvalidOptions) as e:  # the values do not fit the fixed dims: a placeholder, never 1
        resolved_input_shapes([IMG], {"image": [1, 8, 8]})
    assert e.value.hint.endswith('{"input_shapes": {"image": ["<value>", 3, "<value>", "<value>"]}}')


def test_the_integer_input_hint_leads_with_a_constant_for_a_scalar():
    """A 0-d integer input is a sample rate, a length or a flag: the hint's first example is a constant."""
    with pytest.raises(InvalidOptions) as e:
        generated_samples([InputSpec("sr", "int64", ())], {"sr": ()}, ComparisonOptions())
    assert e.value.hint.startswith('give the one value a real input holds, e.g. {"input_values": {"sr": {"constant": 16000}}}')
    with pytest.raises(InvalidOptions) as e:
        generated_samples([TOKENS], {"tokens": (1, 5)}, ComparisonOptions())
    assert e.value.hint.startswith('give the values a real input holds: a range, e.g. {"input_values": {"tokens": {"low"')


def test_the_integer_input_hint_gives_the_range_of_what_the_type_holds():
    """An int16 input is PCM audio (the wheels' VAD models): its hint spans the type, not token ids 0-100,
    and following it draws samples over the whole type."""
    audio = InputSpec("pcm", "int16", (1, 512))
    with pytest.raises(InvalidOptions) as e:
        generated_samples([audio], {"pcm": (1, 512)}, ComparisonOptions())
    assert '{"input_values": {"pcm": {"low": -32768, "high": 32768}}}' in e.value.hint
    assert "PCM audio" in e.value.hint and "token" not in e.value.hint
    s = generated_samples([audio], {"pcm": (1, 512)},
                          ComparisonOptions(input_values={"pcm": {"low": -32768, "high": 32768}}))
    v = s.calibration[0]["pcm"]
    assert v.dtype == np.int16 and v.min() < -16000 and v.max() > 16000
    with pytest.raises(InvalidOptions) as e:  # ids stay ids
        generated_samples([TOKENS], {"tokens": (1, 5)}, ComparisonOptions())
    assert "token ids" in e.value.hint


def test_generated_samples_are_seeded_and_evaluation_is_held_out():
    opts = ComparisonOptions(calibration_samples=3, eval_samples=2, seed=7)
    shapes = {"x": (1, 2, 4)}
    spec = [InputSpec("x", "float32", ("batch", 2, 4))]
    a, b = generated_samples(spec, shapes, opts), generated_samples(spec, shapes, opts)
    assert len(a.calibration) == 3 and len(a.evaluation) == 2
    assert all(np.array_equal(x["x"], y["x"]) for x, y in zip(a.calibration, b.calibration))
    assert not np.array_equal(a.calibration[0]["x"], a.evaluation[0]["x"])
    assert a.calibration[0]["x"].dtype == np.float32 and a.calibration[0]["x"].shape == (1, 2, 4)


def test_integer_inputs_need_a_range_and_the_error_names_the_input():
    with pytest.raises(InvalidOptions, match="'tokens' is int64") as e:
        generated_samples([TOKENS], {"tokens": (1, 5)}, ComparisonOptions())
    assert "input_values" in e.value.hint
    s = generated_samples([TOKENS], {"tokens": (1, 5)},
                          ComparisonOptions(input_values={"tokens": {"low": 0, "high": 10}}))
    v = s.calibration[0]["tokens"]
    assert v.dtype == np.int64 and v.min() >= 0 and v.max() < 10


def _npz(tmp_path, **arrays):
    path = tmp_path / "calib.npz"
    np.savez(path, **arrays)
    return path


def test_uploaded_npz_splits_calibration_and_held_out_evaluation(tmp_path):
    spec = [InputSpec("x", "float32", ("batch", 2))]
    path = _npz(tmp_path, x=np.random.rand(10, 1, 2).astype(np.float32))
    s = samples_from_npz(path, spec, {"x": (1, 2)}, ComparisonOptions(calibration_samples=6, eval_samples=4))
    assert s.info.source == "uploaded" and len(s.calibration) == 6 and len(s.evaluation) == 4
    assert s.calibration[0]["x"].shape == (1, 2) and s.info.eval_held_out


def test_an_npz_too_small_to_hold_samples_out_says_so_in_the_cli_header(tmp_path, compared):
    """With one sample, evaluation reuses the calibration sample; the CLI header read '1 calibration /
    1 evaluation (uploaded)' and only samples.notes said so."""
    from service.render.text import summary_table

    spec = [InputSpec("x", "float32", ("batch", 2))]
    s = samples_from_npz(_npz(tmp_path, x=np.random.rand(1, 1, 2).astype(np.float32)), spec, {"x": (1, 2)},
                         ComparisonOptions(calibration_samples=4, eval_samples=2))
    assert not s.info.eval_held_out and s.evaluation[0]["x"] is s.calibration[0]["x"]
    report, _ = compared("conv_relu")
    header = summary_table(report.model_copy(update={"samples": s.info})).splitlines()[1]
    assert "(uploaded; evaluation reuses calibration samples, none held out)" in header
    assert "none held out" not in summary_table(report).splitlines()[1]


def test_an_npz_of_many_tiny_samples_builds_feeds_only_for_the_samples_the_job_uses(tmp_path):
    """Half a million [1] samples compress to a small upload; one feed dict per sample was ~150 MB
    here (2.9 GB in the API process for 8 M samples)."""
    import tracemalloc

    spec = [InputSpec("x", "float32", (1,))]
    path = tmp_path / "calib.npz"
    np.savez_compressed(path, x=np.zeros((500_000, 1), np.float32))
    tracemalloc.start()
    try:
        s = samples_from_npz(path, spec, {"x": (1,)}, ComparisonOptions(calibration_samples=4, eval_samples=2))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(s.calibration) == 4 and len(s.evaluation) == 2
    assert peak < 30 << 20, f"{peak / 2**20:.0f} MiB"  # the arrays themselves are 2 MB


@pytest.mark.parametrize("arrays, needle", [
    ({"y": np.zeros((4, 1, 2), np.float32)}, "missing: x"),
    ({"x": np.zeros((4, 1, 3), np.float32)}, "expected \\[samples, 1, 2\\]"),
    ({"x": np.full((4, 1, 2), np.nan, np.float32)}, "NaN or Inf"),
    ({"x": np.zeros((4, 1, 2), np.int32)}, "is int32"),
], ids=["wrong key", "wrong shape", "NaN", "wrong dtype"])
def test_bad_npz_is_refused_with_what_to_fix(tmp_path, arrays, needle):
    spec = [InputSpec("x", "float32", ("batch", 2))]
    with pytest.raises(InvalidCalibration, match=needle):
        samples_from_npz(_npz(tmp_path, **arrays), spec, {"x": (1, 2)}, ComparisonOptions())


def test_npz_that_is_not_an_archive_is_refused(tmp_path):
    path = tmp_path / "calib.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(InvalidCalibration, match="not a readable .npz"):
        samples_from_npz(path, [InputSpec("x", "float32", (1,))], {"x": (1,)}, ComparisonOptions())


def test_a_misspelt_ort_extra_option_is_refused_not_ignored():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="WeightSymetric"):
        ComparisonOptions(ort={"extra_options": {"WeightSymetric": True}})
    assert ComparisonOptions(ort={"extra_options": {"WeightSymmetric": True}}).ort.extra_options == {"WeightSymmetric": True}


def _identity_of(elem_type):
    return models.build("identity", shape=[2], elem=elem_type, opset=21, ir=10)


def test_every_input_dtype_taken_is_one_ort_is_fed_from_numpy():
    import onnx
    import onnxruntime as ort

    from service.pipeline.inputs.specs import FEEDABLE_DTYPES, input_specs_from_onnx

    for name in sorted(FEEDABLE_DTYPES):
        model = _identity_of(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(name)))
        assert input_specs_from_onnx(model)[0].dtype == name
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert sess.run(None, {"x": np.ones(2, name)})[0].dtype == np.dtype(name)


@pytest.mark.parametrize("elem", ["BFLOAT16", "FLOAT8E4M3FN", "INT4", "COMPLEX64", "STRING"])
def test_an_input_no_sample_can_feed_is_refused_by_name_before_any_path(elem):
    """bfloat16 was fed float32 and every path failed on ORT's type check; the refusal says why."""
    import onnx

    from service.errors import UnsupportedModel
    from service.pipeline.inputs.specs import input_specs_from_onnx

    with pytest.raises(UnsupportedModel, match="input 'x' is ") as e:
        input_specs_from_onnx(_identity_of(getattr(onnx.TensorProto, elem)))
    assert "inside the graph" in e.value.hint or "token ids" in e.value.hint


def test_ort_takes_no_numpy_bfloat16_feed():
    """The oracle for the bfloat16 refusal: ml_dtypes' bfloat16 is what a numpy user would pass."""
    import onnx
    import onnxruntime as ort

    ml_dtypes = pytest.importorskip("ml_dtypes")
    sess = ort.InferenceSession(_identity_of(onnx.TensorProto.BFLOAT16).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    for feed in (np.ones(2, ml_dtypes.bfloat16), np.ones(2, np.float32)):
        with pytest.raises(Exception):
            sess.run(None, {"x": feed})


def test_one_symbol_given_two_sizes_keeps_each_given_shape_and_says_so():
    """ORT does not check that inputs sharing a dim_param agree (exporters reuse names loosely), so
    the shapes a user gives stand; the report notes the clash."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    ids, mask = InputSpec("ids", "int64", ("batch", "seq")), InputSpec("mask", "int64", ("batch", "seq"))
    shapes, notes = resolved_input_shapes([ids, mask], {"ids": [1, 16], "mask": [1, 32]})
    assert shapes == {"ids": (1, 16), "mask": (1, 32)}
    assert any("dim 'seq' has different sizes across inputs" in n for n in notes)
    graph = helper.make_graph([helper.make_node("Neg", ["ids"], ["a"]), helper.make_node("Neg", ["mask"], ["b"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("ids", "mask")],
                              [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("a", "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [o.shape for o in sess.run(None, {n: np.zeros(shapes[n], np.int64) for n in shapes})] == [(1, 16), (1, 32)]


def test_an_input_left_to_a_symbol_given_two_sizes_is_refused_naming_them():
    ids, mask, types = (InputSpec(n, "int64", ("batch", "seq")) for n in ("ids", "mask", "types"))
    with pytest.raises(InvalidOptions, match=r"dim 'seq' different values \(16 in input_shapes\['ids'\], 32 in "
                                             r"input_shapes\['mask'\]\), and input\(s\) 'types'"):
        resolved_input_shapes([ids, mask, types], {"ids": [1, 16], "mask": [1, 32]})
