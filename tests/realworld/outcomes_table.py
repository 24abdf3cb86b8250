"""The corpus table of docs/realworld.md, generated from tests/realworld/outcomes.py.

    .venv/bin/python -m tests.realworld.outcomes_table          # print it
    .venv/bin/python -m tests.realworld.outcomes_table --write  # rewrite it in docs/realworld.md

``tests/realworld/test_outcomes_table.py`` fails when docs/realworld.md differs from what this prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.realworld.outcomes import OUTCOMES, PATHS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "realworld.md"
START, END = "<!-- corpus-table:start (generated: python -m tests.realworld.outcomes_table --write) -->", \
    "<!-- corpus-table:end -->"


def render() -> str:
    rows = ["| model | pt2e_qdq | ort_qdq | ort_qoperator | why not ok |", "|---|---|---|---|---|"]
    for o in OUTCOMES.values():
        rows.append(f"| {o.label} | {o.pt2e_qdq} | {o.ort_qdq} | {o.ort_qoperator} | {o.why} |")
    requested = [s for o in OUTCOMES.values() for s in o.statuses().values()]
    ok = requested.count("ok")
    by_design = sum(1 for o in OUTCOMES.values() if o.why.startswith("model is already quantized")
                    for s in o.statuses().values() if s == "skipped")
    applicable = len(requested) - by_design
    rows += ["", f"Paths ok: **{ok} of {len(requested)} = {round(100 * ok / len(requested))} %**; leaving out the "
                 f"{by_design} paths that are `skipped` by design (already quantized uploads are inspected, never "
                 f"quantized twice), **{ok} of {applicable} = {round(100 * ok / applicable)} %**."]
    return "\n".join(rows)


def page_section(text: str) -> str:
    start, end = text.index(START) + len(START), text.index(END)
    return text[start:end].strip("\n")


def write(path: Path = PAGE) -> None:
    text = path.read_text()
    start, end = text.index(START) + len(START), text.index(END)
    path.write_text(text[:start] + "\n" + render() + "\n" + text[end:])


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write()
    else:
        print(render())
