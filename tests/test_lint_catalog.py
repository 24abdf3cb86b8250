"""Every lint code the code base writes is registered (service/pipeline/verdict/lints/, ``@lint``) with
the severities it writes, and docs/lints.md lists exactly the registry's codes with the same severities.

Read from the source (every ``Lint(code=..., severity=...)`` call), so a lint that only a rare model
triggers is held to the catalog too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from service.pipeline.verdict.lints import LINTS as LINT_CATALOG

ROOT = Path(__file__).resolve().parents[1]


def _strings(node: ast.AST, constants: dict[str, str]) -> set[str]:
    """The strings an expression can be: a literal, a module constant, or either branch of an if-else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name) and node.id in constants:
        return {constants[node.id]}
    if isinstance(node, ast.IfExp):
        return _strings(node.body, constants) | _strings(node.orelse, constants)
    return set()


def _lints_written() -> dict[str, set[str]]:
    written: dict[str, set[str]] = {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Lint"):
                continue
            kw = {k.arg: k.value for k in call.keywords}
            codes = _strings(kw["code"], constants)
            assert codes, f"{path}: a Lint whose code is not a literal or a module constant"
            severities = _strings(kw["severity"], constants) if "severity" in kw else {"warning"}
            for code in codes:
                written.setdefault(code, set()).update(severities)
    return written


def test_every_lint_the_code_writes_is_in_the_catalog_with_its_severities():
    written = _lints_written()
    assert len(written) >= 30  # the walk finds them: a refactor that hides them fails here, not silently
    missing = sorted(set(written) - set(LINT_CATALOG))
    assert missing == []
    wrong = {c: (sorted(s), LINT_CATALOG[c].severities) for c, s in written.items()
             if not s <= set(LINT_CATALOG[c].severities)}
    assert wrong == {}
    unused = sorted(set(LINT_CATALOG) - set(written))
    assert unused == []


def test_the_docs_list_exactly_the_catalog():
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([a-z, ]+) \|", (ROOT / "docs" / "lints.md").read_text(), re.M)
    documented = {code: tuple(s.strip() for s in sev.split(",")) for code, sev in rows}
    assert documented == {code: kind.severities for code, kind in LINT_CATALOG.items()}


def test_each_code_is_one_registered_function_and_the_decide_stage_runs_the_registry():
    """A new lint is one function (``@lint``) and one docs line: nothing else gathers lints."""
    from service.pipeline.verdict import decide
    from service.pipeline.verdict.lints import registry

    assert all(kind.code == code and callable(kind.find) for code, kind in LINT_CATALOG.items())
    assert len({kind.find for kind in LINT_CATALOG.values()}) == len(LINT_CATALOG)
    assert decide.run_lints is registry.run_lints
    assert "run_lints(" in (ROOT / "service" / "pipeline" / "verdict" / "decide.py").read_text()
