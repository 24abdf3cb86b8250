"""The rule of the report as it comes (issue 39), checked the same way everywhere: every figure a partial
report holds is the finished report's figure at the same place."""

from __future__ import annotations


def _leaves(value, path=()):
    """(path, value) of every leaf that holds something: null, empty lists and empty dicts say "not yet"."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        if value:
            yield path, value
    elif value is not None:
        yield path, value


def _at(value, path):
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def assert_nothing_changes_later(partial: dict, final: dict, section: str = "") -> None:
    """``partial`` and ``final`` as JSON (``model_dump(mode="json")``): ``partial``/``sections_done`` aside,
    each value the partial report holds stands unchanged in the final one."""
    for path, value in _leaves(partial):
        if path[0] in ("partial", "sections_done"):
            continue
        assert _at(final, path) == value, (section, path)
