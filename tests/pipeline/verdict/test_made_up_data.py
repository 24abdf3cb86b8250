"""Numbers that describe generated data say so: a lint, a banner (page and CLI), a CI gate; and
where the model states its inputs' range, samples are drawn in it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from service.errors import InvalidOptions
from service.pipeline.verdict.gates import gate_from_string, verdict_from_report
from service.pipeline.inputs.model_ranges import input_ranges_from_onnx
from service.schemas.options import ComparisonOptions
from service.pipeline.inputs.samples import generated_samples
from service.pipeline.inputs.specs import input_specs_from_onnx, resolved_input_shapes
from tests import models

FAST = {"calibration_samples": 2, "eval_samples": 1, "levels": ["disable_all"], "artifacts": ["ort_qdq"]}


# -- lint, banner, gate ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def generated_and_uploaded(tmp_path_factory, tiny_onnx_models):
    from service.pipeline.compare import ComparisonRequest, run_comparison

    model = tiny_onnx_models["conv_relu"]
    spec = input_specs_from_onnx(onnx.load(str(model), load_external_data=False))[0]
    shape = resolved_input_shapes([spec], {})[0][spec.name]
    cal = tmp_path_factory.mktemp("npz") / "cal.npz"
    np.savez(cal, **{spec.name: np.random.default_rng(0).random((3, *shape), dtype=np.float32)})
    opts = ComparisonOptions.model_validate({**FAST, "latency": {"enabled": False},
                                             "gates": [gate_from_string("calibration_data_uploaded").model_dump()]})
    out = {}
    for label, path in (("generated", None), ("uploaded", cal)):
        out[label] = run_comparison(ComparisonRequest(model_path=model, calibration_path=path, options=opts),
                                    tmp_path_factory.mktemp(label))
    return out


def test_generated_data_gets_a_lint_and_fails_the_gate(generated_and_uploaded):
    report = generated_and_uploaded["generated"]
    lint = next(x for x in report.lints if x.code == "generated_samples")
    assert "normal(0, 1)" in lint.message and "calibration_data_uploaded" in lint.hint
    gate = report.verdict.gates[0]
    assert not report.verdict.passed and gate.actual == 0.0 and "no .npz was uploaded" in gate.message


def test_uploaded_data_has_no_lint_and_passes_the_gate(generated_and_uploaded):
    report = generated_and_uploaded["uploaded"]
    assert not [x for x in report.lints if x.code == "generated_samples"]
    assert report.verdict.passed and report.verdict.gates[0].actual == 1.0


def test_banner_on_the_cli_summary_and_the_page_only_for_generated_data(generated_and_uploaded):
    from service.render.page import render_job_page
    from service.jobs.spec import JobSpec
    from service.jobs.store import JobRecord
    from service.render.text import summary_table

    def page(report):
        rec = JobRecord(id="a" * 32, status="succeeded", spec=JobSpec(id="a" * 32, model_name="m"), cache_key=None,
                        created_at=time.time(), started_at=None, finished_at=None, stage=None, done=0, total=0,
                        error=None, attempts=1)
        return render_job_page(rec, report, [])

    gen, up = generated_and_uploaded["generated"], generated_and_uploaded["uploaded"]
    assert "MADE-UP DATA" in summary_table(gen) and "MADE-UP DATA" not in summary_table(up)
    assert 'class="banner-made-up"' in page(gen) and 'class="banner-made-up"' not in page(up)


@pytest.mark.parametrize("text", ["ort_qdq.calibration_data_uploaded", "all.calibration_data_uploaded"])
def test_the_gate_is_about_the_whole_report(text):
    from quantcompare_client._gates import GateSyntaxError, parse_gate

    with pytest.raises(InvalidOptions, match="whole report"):
        gate_from_string(text)
    with pytest.raises(GateSyntaxError, match="whole report"):
        parse_gate(text)


def test_client_and_server_read_the_gate_alike():
    from quantcompare_client._gates import format_gate, parse_gate

    server = gate_from_string("calibration_data_uploaded")
    assert parse_gate("calibration_data_uploaded") == server.model_dump(exclude_none=True, exclude={"on_noisy"})  # JSON-form only
    assert format_gate(parse_gate("calibration_data_uploaded")) == "calibration_data_uploaded"


# -- ranges the model states -------------------------------------------------------------------

def _save(tmp_path: Path, nodes, inputs, inits, name="m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(models.from_nodes(nodes, inputs, [("y", None)], inits), str(path))
    return path


def _samples(path: Path, **options):
    model = onnx.load(str(path))
    specs = input_specs_from_onnx(model)
    shapes, _ = resolved_input_shapes(specs, options.pop("input_shapes", {}))
    opts = ComparisonOptions.model_validate({"calibration_samples": 64, "eval_samples": 1, **options})
    return generated_samples(specs, shapes, opts, model_ranges=input_ranges_from_onnx(model, specs)), model


def _stack(samples, name):
    return np.stack([f[name] for f in samples.calibration])


def test_ids_into_an_embedding_table_are_drawn_below_its_row_count(tmp_path):
    table = nh.from_array(np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32), "emb.weight")
    path = _save(tmp_path, [h.make_node("Cast", ["ids"], ["ids64"], to=T.INT64),
                            h.make_node("Gather", ["emb.weight", "ids64"], ["e"]),
                            h.make_node("ReduceMean", ["e"], ["y"], keepdims=0)],
                 [h.make_tensor_value_info("ids", T.INT32, [1, 16])], [table])
    samples, _ = _samples(path)  # refused before: an int input needed options.input_values
    ids = _stack(samples, "ids")
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 50 and ids.max() >= 40
    assert "50 rows of 'emb.weight'" in samples.info.generators["ids"]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # the oracle: ORT accepts every id
    for feed in samples.calibration[:4]:
        sess.run(None, feed)
    override, _ = _samples(path, input_values={"ids": {"low": 0, "high": 3}})
    assert _stack(override, "ids").max() < 3  # the option still wins


def test_ids_fed_as_float_are_drawn_as_whole_numbers_below_the_row_count(tmp_path):
    """Keras exports (tf2onnx) take token ids as float and Cast them to int64 for the Gather: they were
    drawn normal(0, 1), so the ids were -2..2, and ORT's Gather reads -1 and -2 from the table's end."""
    table = nh.from_array(np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32), "emb.weight")
    path = _save(tmp_path, [h.make_node("Cast", ["ids"], ["ids64"], to=T.INT64),
                            h.make_node("Gather", ["emb.weight", "ids64"], ["e"]),
                            h.make_node("ReduceMean", ["e"], ["y"], keepdims=0)],
                 [h.make_tensor_value_info("ids", T.FLOAT, [1, 16])], [table])
    samples, _ = _samples(path)
    ids = _stack(samples, "ids")
    assert ids.dtype == np.float32 and np.array_equal(ids, np.round(ids))
    assert ids.min() >= 0 and ids.max() < 50 and ids.max() >= 40
    assert "50 rows of 'emb.weight'" in samples.info.generators["ids"]


@pytest.mark.parametrize("pick", ["Gather", "Slice"])
def test_ids_whose_columns_are_picked_before_the_table_are_drawn_below_its_row_count(tmp_path, pick):
    """LORE's table processor (lineless_table_rec): dets [1, N, 8] int64 corner coordinates, each
    column taken with Gather(axis=2, constant index) and looked up in a 256-row position embedding;
    refused before with "cannot guess valid values" (the column pick was not followed)."""
    rng = np.random.default_rng(0)
    xs = nh.from_array(rng.standard_normal((40, 8)).astype(np.float32), "x_pos.weight")
    ys = nh.from_array(rng.standard_normal((30, 8)).astype(np.float32), "y_pos.weight")
    if pick == "Gather":
        nodes = [h.make_node("Gather", ["dets", "c0"], ["d0"], axis=2), h.make_node("Gather", ["dets", "c1"], ["d1"], axis=2)]
        consts = [nh.from_array(np.array(0, np.int64), "c0"), nh.from_array(np.array(1, np.int64), "c1")]
    else:
        nodes = [h.make_node("Slice", ["dets", "c0", "c1", "ax"], ["d0"]), h.make_node("Slice", ["dets", "c1", "c2", "ax"], ["d1"])]
        consts = [nh.from_array(np.array([k], np.int64), f"c{k}") for k in range(3)] + [nh.from_array(np.array([2], np.int64), "ax")]
    nodes += [h.make_node("Gather", ["x_pos.weight", "d0"], ["ex"]), h.make_node("Gather", ["y_pos.weight", "d1"], ["ey"]),
              h.make_node("Add", ["ex", "ey"], ["e"]), h.make_node("ReduceMean", ["e"], ["y"], keepdims=0)]
    path = _save(tmp_path, nodes, [h.make_tensor_value_info("dets", T.INT64, [1, 6, 2])], [xs, ys] + consts)
    samples, _ = _samples(path)
    dets = _stack(samples, "dets")
    assert dets.min() >= 0 and dets.max() < 30 and dets.max() >= 20
    assert "30 rows of 'y_pos.weight'" in samples.info.generators["dets"]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feed in samples.calibration[:4]:
        sess.run(None, feed)


def test_an_id_input_used_elsewhere_too_gets_no_guessed_range(tmp_path):
    table = nh.from_array(np.zeros((50, 8), np.float32), "emb.weight")
    path = _save(tmp_path, [h.make_node("Gather", ["emb.weight", "ids"], ["e"]),
                            h.make_node("Cast", ["ids"], ["f"], to=T.FLOAT),
                            h.make_node("ReduceMean", ["e"], ["m"], keepdims=0),
                            h.make_node("Add", ["m", "f"], ["y"])],
                 [h.make_tensor_value_info("ids", T.INT64, [1, 1])], [table])
    with pytest.raises(InvalidOptions, match="cannot guess"):
        _samples(path)


MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


@pytest.mark.parametrize("first_ops", ["sub_div", "sub_mul", "batchnorm"])
def test_a_normalized_input_is_drawn_so_the_network_sees_normal_0_1(tmp_path, first_ops):
    x = [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 32, 32])]
    if first_ops == "batchnorm":
        inits = [nh.from_array(np.ones(3, np.float32), "g"), nh.from_array(np.zeros(3, np.float32), "b"),
                 nh.from_array(MEAN.reshape(3), "mu"), nh.from_array((STD.reshape(3) ** 2), "var")]
        nodes = [h.make_node("BatchNormalization", ["x", "g", "b", "mu", "var"], ["n"], epsilon=1e-9)]
    else:
        k = STD if first_ops == "sub_div" else 1 / STD
        inits = [nh.from_array(MEAN, "mean"), nh.from_array(k.astype(np.float32), "k")]
        nodes = [h.make_node("Sub", ["x", "mean"], ["c"]),
                 h.make_node("Div" if first_ops == "sub_div" else "Mul", ["c", "k"], ["n"])]
    path = _save(tmp_path, nodes + [h.make_node("Relu", ["n"], ["y"])], x, inits)
    samples, _ = _samples(path)
    raw = _stack(samples, "x")
    normalized = (raw - MEAN) / STD  # what the network computes first: the independent oracle
    assert abs(normalized.mean()) < 0.05 and abs(normalized.std() - 1) < 0.05
    assert np.allclose(raw.mean(axis=(0, 1, 3, 4)), MEAN.reshape(3), atol=0.02)
    assert "mean + std" in samples.info.generators["x"]


@pytest.mark.parametrize("op, k", [("Div", 255.0), ("Mul", 1 / 255.0)])
def test_pixels_scaled_by_255_are_drawn_in_0_255(tmp_path, op, k):
    path = _save(tmp_path, [h.make_node(op, ["x", "k"], ["y"])], [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                 [nh.from_array(np.array(k, np.float32), "k")])
    samples, _ = _samples(path)
    raw = _stack(samples, "x")
    assert raw.min() >= 0 and raw.max() < 255 and raw.max() > 200
    assert samples.info.generators["x"].startswith("uniform [0, 255)")


def test_a_plain_float_input_stays_normal_and_is_flagged(tmp_path):
    path = _save(tmp_path, [h.make_node("Relu", ["x"], ["y"])], [h.make_tensor_value_info("x", T.FLOAT, [1, 4])], [])
    samples, _ = _samples(path)
    assert samples.info.generators["x"] == "normal(0, 1)"
    from service.pipeline.verdict.made_up_data import made_up_data_banner

    assert "normal(0, 1) samples for x" in made_up_data_banner(samples.info)


def _padding_mask_model(tmp_path: Path, name: str) -> Path:
    """A key-padding mask as torch exports ``src_key_padding_mask=mask == 0``: Equal(mask, 0) -> Where(-inf) -> Softmax."""
    return _save(tmp_path, [h.make_node("Equal", [name, "zero"], ["pad"]),
                            h.make_node("Where", ["pad", "neg_inf", "x"], ["scores"]),
                            h.make_node("Softmax", ["scores"], ["y"], axis=-1)],
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 4]), h.make_tensor_value_info(name, T.INT64, [1, 4])],
                 [nh.from_array(np.array(0, np.int64), "zero"), nh.from_array(np.array(-np.inf, np.float32), "neg_inf")])


def test_an_integer_attention_mask_attends_every_position(tmp_path):
    """Equal(mask, 0) against one scalar was read as a one-hot of one class: every mask value drawn 0,
    every position padded, NaN out of the softmax, and no quantizer could calibrate (a BERT-like export)."""
    path = _padding_mask_model(tmp_path, "attention_mask")
    samples, _ = _samples(path)
    assert (_stack(samples, "attention_mask") == 1).all()
    assert samples.info.generators["attention_mask"].startswith("constant 1: an integer mask by its name")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # the oracle: ORT's outputs are numbers
    assert all(np.isfinite(sess.run(None, feed)[0]).all() for feed in samples.calibration)
    padded, _ = _samples(path, input_values={"attention_mask": {"low": 0, "high": 2}})
    assert _stack(padded, "attention_mask").min() == 0  # the option still wins


def test_an_integer_input_compared_with_one_scalar_is_not_a_one_hot(tmp_path):
    path = _padding_mask_model(tmp_path, "masked_lm_positions")  # not a mask by its name: nothing to guess from
    with pytest.raises(InvalidOptions, match="cannot guess"):
        _samples(path)


@pytest.mark.parametrize("first", ["cast", "transpose_then_cast"])
def test_a_uint8_image_cast_to_float_is_drawn_over_every_byte(tmp_path, first):
    """TF-exported image models take uint8 [1, H, W, 3] and Cast it to float: refused before ("cannot guess")."""
    nodes = ([h.make_node("Transpose", ["img"], ["t"], perm=[0, 3, 1, 2]), h.make_node("Cast", ["t"], ["f"], to=T.FLOAT)]
             if first == "transpose_then_cast" else [h.make_node("Cast", ["img"], ["f"], to=T.FLOAT)])
    path = _save(tmp_path, nodes + [h.make_node("ReduceMean", ["f"], ["y"], keepdims=0)],
                 [h.make_tensor_value_info("img", T.UINT8, [1, 8, 8, 3])], [])
    samples, _ = _samples(path)
    img = _stack(samples, "img")
    assert img.dtype == np.uint8 and img.min() <= 5 and img.max() >= 250
    assert samples.info.generators["img"].startswith("uniform int [0, 256)")


def test_a_uint8_input_used_as_a_number_elsewhere_too_is_not_guessed(tmp_path):
    path = _save(tmp_path, [h.make_node("Cast", ["img"], ["f"], to=T.FLOAT),
                            h.make_node("Add", ["img", "one"], ["p"]),
                            h.make_node("Cast", ["p"], ["pf"], to=T.FLOAT),
                            h.make_node("Add", ["f", "pf"], ["y"])],
                 [h.make_tensor_value_info("img", T.UINT8, [1, 4])], [nh.from_array(np.array(1, np.uint8), "one")])
    with pytest.raises(InvalidOptions, match="cannot guess"):
        _samples(path)


def test_ids_into_an_embedding_table_in_external_data_get_its_row_count(tmp_path):
    """Every large transformer export keeps its embedding table in external data: its dims are in the
    graph, its bytes are not read. Before, the table was skipped and input_ids refused ("cannot guess")."""
    table = nh.from_array(np.random.default_rng(0).standard_normal((300, 64)).astype(np.float32), "emb.weight")
    path = _save(tmp_path, [h.make_node("Gather", ["emb.weight", "ids"], ["e"]),
                            h.make_node("ReduceMean", ["e"], ["y"], keepdims=0)],
                 [h.make_tensor_value_info("ids", T.INT64, [1, 16])], [table])
    onnx.save(onnx.load(str(path)), str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    assert model.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    ranges = input_ranges_from_onnx(model, input_specs_from_onnx(model))
    assert ranges["ids"].description == "uniform int [0, 300)"
