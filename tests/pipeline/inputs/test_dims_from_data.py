"""Dynamic dims come from the uploaded calibration data; a .pt2's leading symbol is the batch.

The oracle for every shape is the array the test writes: ``array.shape[1:]`` is what one sample
of the input must be. Disagreements are refused with both values in the message.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.errors import InputShapeRequired, InvalidCalibration
from service.pipeline.inputs.data_shapes import array_shapes_in_npz
from service.pipeline.inputs.specs import InputSpec, resolved_input_shapes
from tests import models

IMG = InputSpec("image", "float32", ("batch", 3, "height", "width"))
MASK = InputSpec("mask", "float32", ("batch", 1, "height", "width"))
OPTS = {"calibration_samples": 2, "eval_samples": 1, "latency": {"enabled": False}, "levels": ["disable_all"],
        "artifacts": ["pt2e_qdq", "ort_qdq"]}


def _npz(tmp_path: Path, **arrays) -> Path:
    path = tmp_path / "cal.npz"
    np.savez(path, **arrays)
    return path


def test_header_read_gives_each_array_shape_without_loading_it(tmp_path):
    path = tmp_path / "c.npz"
    np.savez_compressed(path, image=np.zeros((5, 2, 3, 20, 24), np.float32), ids=np.zeros((5, 7), np.int64))
    assert array_shapes_in_npz(path) == {"image": (5, 2, 3, 20, 24), "ids": (5, 7)}


def test_every_dynamic_dim_comes_from_the_data_when_the_option_gives_none():
    data = {"image": (8, 2, 3, 20, 24), "mask": (8, 2, 1, 20, 24)}
    shapes, notes = resolved_input_shapes([IMG, MASK], {}, data_shapes=data)
    assert shapes == {"image": (2, 3, 20, 24), "mask": (2, 1, 20, 24)}
    assert any("height" in n and "calibration data" in n for n in notes)
    with pytest.raises(InputShapeRequired):  # the same model without data still needs values
        resolved_input_shapes([IMG, MASK], {})


def test_an_array_with_the_input_rank_is_one_sample_per_batch_row():
    shapes, _ = resolved_input_shapes([IMG], {}, data_shapes={"image": (8, 3, 20, 24)})
    assert shapes == {"image": (1, 3, 20, 24)}


@pytest.mark.parametrize("specs, option, data, both", [
    ([IMG], {}, {"image": (8, 1, 4, 20, 24)}, ("4", "fixes dim 1 at 3")),
    ([IMG], {"image": [1, 3, 16, 16]}, {"image": (8, 1, 3, 20, 24)}, ("20", "[1, 3, 16, 16]")),
    ([IMG, MASK], {}, {"image": (8, 1, 3, 20, 24), "mask": (8, 1, 1, 32, 24)}, ("32", "height is 20")),
    ([IMG, MASK], {"image": [1, 3, 16, 16]}, {"image": (8, 1, 3, 16, 16), "mask": (8, 1, 1, 20, 16)},
     ("20", "height is 16 in options.input_shapes")),
], ids=["data vs a fixed dim", "data vs input_shapes", "one input's data vs another's",
        "data vs a symbol input_shapes set on another input"])
def test_data_that_disagrees_is_refused_naming_both_values(specs, option, data, both):
    with pytest.raises(InvalidCalibration) as e:
        resolved_input_shapes(specs, option, data_shapes=data)
    for text in both:
        assert text in e.value.message, e.value.message
    assert e.value.code == "invalid_calibration" and e.value.details["data_shape"]


def test_a_pt2_leading_symbol_defaults_to_one_and_keeps_the_range_lower_bound():
    spec = InputSpec("x", "float32", ("s77", 3, 8, 8))
    shapes, notes = resolved_input_shapes([spec], {}, batch_dims={"s77": 1})
    assert shapes == {"x": (1, 3, 8, 8)} and "s77" in notes[0] and "Dim" in notes[0]
    shapes, _ = resolved_input_shapes([spec], {}, batch_dims={"s77": 2})
    assert shapes == {"x": (2, 3, 8, 8)}
    with pytest.raises(InputShapeRequired):  # without the source saying it is a batch, s77 is just unknown
        resolved_input_shapes([spec], {})


def _pt2(tmp_path: Path, batch_min: int | None = None) -> Path:
    import torch
    from torch.export import Dim, export, save

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.conv(x).relu()

    dim = Dim("batch") if batch_min is None else Dim("batch", min=batch_min)
    ep = export(Net(), (torch.randn(4, 3, 16, 16),), dynamic_shapes=({0: dim},))
    path = tmp_path / "net.pt2"
    save(ep, path)
    return path


def _run(tmp_path, model, calibration=None, **extra):
    from service.pipeline.compare import ComparisonRequest, run_comparison
    from service.schemas.options import ComparisonOptions

    request = ComparisonRequest(model_path=model, calibration_path=calibration,
                                options=ComparisonOptions.model_validate({**OPTS, **extra}))
    return run_comparison(request, tmp_path / "job")


def test_pt2_with_a_dim_batch_takes_its_dims_from_the_npz(tmp_path):
    """The issue's upload: Dim("batch") .pt2 + samples of [2, 3, 16, 16] and no input_shapes."""
    cal = _npz(tmp_path, x=np.random.default_rng(0).random((3, 2, 3, 16, 16), dtype=np.float32))
    report = _run(tmp_path, _pt2(tmp_path), cal)
    assert report.model.resolved_input_shapes == {"x": [2, 3, 16, 16]}
    assert report.samples.source == "uploaded"
    assert {a.status for a in report.artifacts.values()} == {"ok"}


def test_pt2_with_a_dim_batch_and_nothing_else_runs_at_batch_one(tmp_path):
    report = _run(tmp_path, _pt2(tmp_path))
    assert report.model.resolved_input_shapes == {"x": [1, 3, 16, 16]}
    assert report.model.inputs[0].shape[0].startswith("s")  # torch's symbol: the archive has no Dim name
    assert {a.status for a in report.artifacts.values()} == {"ok"}


def test_pt2_batch_range_lower_bound_is_the_default(tmp_path):
    from service.pipeline.inputs.sources import source_from_pt2

    source = source_from_pt2(_pt2(tmp_path, batch_min=3), name="net")
    assert list(source.batch_dims.values()) == [3]


def test_prevalidation_takes_dims_from_the_data_too(tmp_path):
    """The API's early check must not refuse what the worker would accept."""
    from service.api.prevalidate import prevalidate_upload
    from service.config import Settings
    from service.schemas.options import ComparisonOptions

    model = models.save("relu", tmp_path / "m.onnx", x="image", shape=["batch", 3, "height", "width"])
    good = _npz(tmp_path, image=np.zeros((2, 1, 3, 10, 12), np.float32))
    prevalidate_upload(model, good, ComparisonOptions(), Settings(data_dir=tmp_path))
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((2, 1, 4, 10, 12), np.float32))
    with pytest.raises(InvalidCalibration, match="fixes dim 1 at 3"):
        prevalidate_upload(model, bad, ComparisonOptions(), Settings(data_dir=tmp_path))


def test_an_npz_with_two_members_of_one_name_is_refused(tmp_path):
    """zipfile and numpy take the last of two same-named members without a word."""
    import io
    import warnings
    import zipfile

    from service.errors import InvalidCalibration

    path = tmp_path / "twice.npz"
    with zipfile.ZipFile(path, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns "Duplicate name"
        for value in (0.0, 1.0):
            buf = io.BytesIO()
            np.save(buf, np.full((2, 3), value, np.float32))
            zf.writestr("x.npy", buf.getvalue())
    assert float(np.load(path)["x"][0, 0]) == 1.0  # what numpy alone reads
    with pytest.raises(InvalidCalibration, match="two members named 'x.npy'"):
        array_shapes_in_npz(path)
