"""The pinned corpus outcomes are one table, docs/realworld.md shows that table, and it covers the corpus."""

from __future__ import annotations

from tests.realworld.corpus import CORPUS
from tests.realworld.outcomes import OUTCOMES, PATHS
from tests.realworld.outcomes_table import PAGE, page_section, render


def test_every_corpus_model_has_a_pinned_outcome_and_no_other():
    assert list(OUTCOMES) == [m.name for m in CORPUS]


def test_pinned_paths_are_the_requested_paths():
    for m in CORPUS:
        requested = m.options_with().get("artifacts", list(PATHS))
        o = OUTCOMES[m.name]
        assert set(o.statuses()) == set(requested), m.name
        assert set(o.statuses().values()) <= {"ok", "failed", "skipped"}, m.name
        assert (o.why == "") == all(s == "ok" for s in o.statuses().values()), f"{m.name}: a non-ok path says why"


def test_docs_corpus_table_is_generated_from_the_outcomes():
    assert page_section(PAGE.read_text()) == render(), \
        "docs/realworld.md's corpus table is stale: run .venv/bin/python -m tests.realworld.outcomes_table --write"
