"""A missing tool or test dependency fails the run under any truthy CI, and skips only on a laptop."""

from __future__ import annotations

import pytest

from tests import missing_tools


@pytest.mark.parametrize("value", ["true", "1", "yes", "TRUE", "on", "gitlab"])
def test_any_truthy_ci_value_is_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    assert missing_tools.running_under_ci()
    with pytest.raises(pytest.fail.Exception, match="under CI"):
        missing_tools.skip_or_fail("curl is missing")
    with pytest.raises(pytest.fail.Exception, match="under CI"):
        missing_tools.require_module("no_such_module_qc")


@pytest.mark.parametrize("value", [None, "", "0", "false", "no", "off", " False "])
def test_no_ci_skips(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not missing_tools.running_under_ci()
    with pytest.raises(pytest.skip.Exception):
        missing_tools.skip_or_fail("curl is missing")
    with pytest.raises(pytest.skip.Exception):
        missing_tools.require_module("no_such_module_qc")


def test_an_installed_module_is_returned(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert missing_tools.require_module("json").dumps([1]) == "[1]"
