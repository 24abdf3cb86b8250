"""docs/options.md holds to ComparisonOptions, as docs/lints.md holds to the lint registry: every option
has a row, every row names an option, and a default the page writes as JSON is the model's default.

A new option without a docs row, a renamed one, or a default changed in the code alone fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel

from service.schemas.options import ComparisonOptions

ROOT = Path(__file__).resolve().parents[1]


def _rows() -> list[tuple[list[str], str, str]]:
    """(the option names a row documents, its default cell, its meaning) for each row of the options table."""
    text = (ROOT / "docs" / "options.md").read_text()
    table = text.split("| option | default | meaning |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.strip().splitlines()[1:]:
        option, default, meaning = (c.strip() for c in line.strip().strip("|").split(" | ", 2))
        rows.append((re.findall(r"`([^`]+)`", option), default, meaning))
    return rows


def _default(field) -> object:
    value = field.get_default(call_default_factory=True)
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def test_every_option_has_a_row_and_every_row_an_option():
    documented = {name.split(".")[0] for names, _, _ in _rows() for name in names}
    assert documented == set(ComparisonOptions.model_fields)


def test_a_dotted_row_names_a_field_of_its_option_and_a_starred_row_names_them_all():
    fields = ComparisonOptions.model_fields
    for names, _, meaning in _rows():
        for name in names:
            if "." not in name:
                continue
            top, sub = name.split(".", 1)
            model = fields[top].annotation
            if sub == "*":  # `ort.*`: the meaning names each field in backticks
                assert set(model.model_fields) <= set(re.findall(r"`([a-z_]+)`", meaning)), name
            else:
                assert sub in model.model_fields, name
    # an option of several fields documented field by field has a row for every one of them
    for top in {n.split(".")[0] for names, _, _ in _rows() for n in names if "." in n and not n.endswith("*")}:
        rows = {n.split(".", 1)[1] for names, _, _ in _rows() for n in names if n.startswith(top + ".")}
        assert rows == set(fields[top].annotation.model_fields), top


def test_a_default_written_as_json_is_the_models_default():
    fields = ComparisonOptions.model_fields
    checked = 0
    for names, default, _ in _rows():
        cells = [c.strip().strip("`") for c in default.split(" / ")] if len(names) > 1 else [default.strip("`")]
        for name, cell in zip(names, cells):
            try:
                written = json.loads(cell)
            except ValueError:
                continue  # "all three", "from preset", "this machine": said in words
            top, _, sub = name.partition(".")
            expected = _default(fields[top]) if not sub else _default(fields[top].annotation.model_fields[sub])
            assert written == expected, name
            checked += 1
    assert checked >= 15, checked  # the table's JSON defaults are read: a change of format fails here, not silently
